// ember-run's argument parsing: defaults, both spellings and the = form of
// options, where the program's own arguments start, and the usage errors.
// (Running ranks is checked by tests/parallel/launcher_check.sh.)
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "ember/core/cuda/device.h"
#include "ember/parallel/launcher/launcher.h"

namespace ember::parallel {
namespace {

using Args = std::vector<std::string>;

// The usage error's text, or "no error".
std::string usage_error_of(const Args& args) {
  try {
    parse_launcher_args(args);
  } catch (const LauncherUsageError& e) {
    return e.what();
  }
  return "no error";
}

TEST(LauncherArgs, Defaults) {
  LauncherOptions o = parse_launcher_args({"./train"});
  EXPECT_EQ(o.nproc_per_node, 1);
  EXPECT_EQ(o.nnodes, 1);
  EXPECT_EQ(o.node_rank, 0);
  EXPECT_EQ(o.master_addr, "127.0.0.1");
  EXPECT_EQ(o.master_port, 29500);
  EXPECT_FALSE(o.standalone);
  EXPECT_EQ(o.grace_period, std::chrono::seconds(5));
  EXPECT_EQ(o.command, Args{"./train"});
}

TEST(LauncherArgs, OptionsInEverySpelling) {
  LauncherOptions o = parse_launcher_args({"--nproc-per-node", "4", "--nnodes=2", "--node_rank", "1", "--master-addr",
                                           "10.0.0.1", "--master_port=1234", "--grace-period", "0.5", "prog", "a"});
  EXPECT_EQ(o.nproc_per_node, 4);
  EXPECT_EQ(o.nnodes, 2);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.master_addr, "10.0.0.1");
  EXPECT_EQ(o.master_port, 1234);
  EXPECT_EQ(o.grace_period, std::chrono::milliseconds(500));
  EXPECT_EQ(o.command, (Args{"prog", "a"}));
}

TEST(LauncherArgs, TheProgramsArgumentsAreItsOwn) {
  EXPECT_EQ(parse_launcher_args({"prog", "--nproc-per-node", "3", "--help"}).command,
            (Args{"prog", "--nproc-per-node", "3", "--help"}));
  EXPECT_EQ(parse_launcher_args({"--standalone", "--", "-prog", "x"}).command, (Args{"-prog", "x"}));
  EXPECT_TRUE(parse_launcher_args({"--standalone", "prog"}).standalone);
  EXPECT_TRUE(parse_launcher_args({"--help"}).help);
  EXPECT_TRUE(parse_launcher_args({"-h", "--bogus"}).help);
}

TEST(LauncherArgs, UsageErrors) {
  EXPECT_EQ(usage_error_of({}), "no program to run");
  EXPECT_EQ(usage_error_of({"--nproc-per-node"}), "--nproc-per-node needs a value");
  EXPECT_EQ(usage_error_of({"--nproc-per-node", "0", "p"}), "--nproc-per-node takes an integer in [1, 4096], got '0'");
  EXPECT_EQ(usage_error_of({"--nnodes=x", "p"}), "--nnodes takes an integer in [1, 65536], got 'x'");
  EXPECT_EQ(usage_error_of({"--master-port", "0", "p"}), "--master-port takes an integer in [1, 65535], got '0'");
  EXPECT_EQ(usage_error_of({"--master-addr=", "p"}), "--master-addr is empty");
  EXPECT_EQ(usage_error_of({"--frobnicate", "p"}), "unknown option '--frobnicate'");
  EXPECT_EQ(usage_error_of({"--nnodes", "2", "--node-rank", "2", "p"}), "--node-rank 2 is not below --nnodes 2");
  EXPECT_EQ(usage_error_of({"--standalone", "--nnodes", "2", "p"}), "--standalone runs one node, but --nnodes is 2");
  EXPECT_EQ(usage_error_of({"--standalone", "--master-addr", "h", "p"}),
            "--standalone picks the address and port itself; drop --master-addr/--master-port");
  EXPECT_EQ(usage_error_of({"--standalone=1", "p"}), "--standalone takes no value");
  EXPECT_EQ(usage_error_of({"--grace-period", "soon", "p"}), "--grace-period takes seconds in [0, 3600], got 'soon'");
}

TEST(LauncherArgs, GpuMeansOnePerVisibleGpu) {
  if (cuda::device_count() == 0) {
    EXPECT_NE(usage_error_of({"--nproc-per-node", "gpu", "p"}).find("--nproc-per-node gpu: no GPU is visible"),
              std::string::npos);
  } else {
    EXPECT_EQ(parse_launcher_args({"--nproc-per-node", "gpu", "p"}).nproc_per_node, cuda::device_count());
  }
}

}  // namespace
}  // namespace ember::parallel
