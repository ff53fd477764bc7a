// rank_info_from_env: the variables of ember-run/torchrun, Open MPI's mpirun
// and SLURM's srun, their precedence, defaults and the errors for missing
// or garbled ones; the SLURM list parsers.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ember/parallel/distributed/rank_env.h"
#include "support/error_message.h"

namespace ember::parallel {
namespace {

using testing::throws_with;

// Clears every launcher variable for the test and restores them after.
class RankEnv : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kNames) {
      if (const char* v = getenv(name)) saved_[name] = v;
      unsetenv(name);
    }
  }
  void TearDown() override {
    for (const char* name : kNames) unsetenv(name);
    for (const auto& [name, value] : saved_) setenv(name.c_str(), value.c_str(), 1);
  }
  void set(const std::map<std::string, std::string>& vars) {
    for (const auto& [name, value] : vars) setenv(name.c_str(), value.c_str(), 1);
  }

  static constexpr const char* kNames[] = {"RANK",
                                           "WORLD_SIZE",
                                           "LOCAL_RANK",
                                           "LOCAL_WORLD_SIZE",
                                           "MASTER_ADDR",
                                           "MASTER_PORT",
                                           "OMPI_COMM_WORLD_RANK",
                                           "OMPI_COMM_WORLD_SIZE",
                                           "OMPI_COMM_WORLD_LOCAL_RANK",
                                           "OMPI_COMM_WORLD_LOCAL_SIZE",
                                           "SLURM_PROCID",
                                           "SLURM_NTASKS",
                                           "SLURM_LOCALID",
                                           "SLURM_NTASKS_PER_NODE",
                                           "SLURM_TASKS_PER_NODE",
                                           "SLURM_STEP_TASKS_PER_NODE",
                                           "SLURM_NODEID",
                                           "SLURM_STEP_NODELIST",
                                           "SLURM_JOB_NODELIST",
                                           "SLURM_NODELIST",
                                           "EMBER_AGENT_STORE",
                                           "TORCHELASTIC_USE_AGENT_STORE",
                                           "TORCHELASTIC_RESTART_COUNT"};
  std::map<std::string, std::string> saved_;
};

TEST_F(RankEnv, TorchrunVariables) {
  set({{"RANK", "5"},
       {"WORLD_SIZE", "8"},
       {"LOCAL_RANK", "1"},
       {"LOCAL_WORLD_SIZE", "4"},
       {"MASTER_ADDR", "10.1.2.3"},
       {"MASTER_PORT", "29500"}});
  RankInfo info = rank_info_from_env();
  EXPECT_EQ(info.rank, 5);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_world_size, 4);
  EXPECT_EQ(info.master_addr, "10.1.2.3");
  EXPECT_EQ(info.master_port, 29500);
  EXPECT_EQ(info.launcher, "ember-run/torchrun");
}

TEST_F(RankEnv, WhoServesTheStore) {
  set({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}});
  EXPECT_EQ(rank_info_from_env().store_host, StoreHost::Rank0);
  set({{"TORCHELASTIC_USE_AGENT_STORE", "False"}});
  EXPECT_EQ(rank_info_from_env().store_host, StoreHost::Rank0);
  set({{"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"TORCHELASTIC_RESTART_COUNT", "3"}});
  RankInfo info = rank_info_from_env();
  EXPECT_EQ(info.store_host, StoreHost::TorchrunAgent);
  EXPECT_EQ(info.restart_count, 3);
  set({{"EMBER_AGENT_STORE", "1"}});
  EXPECT_EQ(rank_info_from_env().store_host, StoreHost::EmberRun);
  unsetenv("EMBER_AGENT_STORE");
  set({{"TORCHELASTIC_RESTART_COUNT", "x"}});
  EXPECT_TRUE(throws_with([] { rank_info_from_env(); }, {"TORCHELASTIC_RESTART_COUNT='x'", "not an integer"}));
}

TEST_F(RankEnv, LocalVariablesDefaultToOneNode) {
  set({{"RANK", "2"}, {"WORLD_SIZE", "3"}, {"MASTER_ADDR", "localhost"}, {"MASTER_PORT", "1234"}});
  RankInfo info = rank_info_from_env();
  EXPECT_EQ(info.local_rank, 2);
  EXPECT_EQ(info.local_world_size, 3);
}

TEST_F(RankEnv, TorchrunVariablesWinOverMpiAndSlurm) {
  set({{"RANK", "1"},
       {"WORLD_SIZE", "2"},
       {"MASTER_ADDR", "a"},
       {"MASTER_PORT", "1"},
       {"OMPI_COMM_WORLD_RANK", "0"},
       {"SLURM_PROCID", "0"}});
  EXPECT_EQ(rank_info_from_env().rank, 1);
}

TEST_F(RankEnv, OpenMpiVariables) {
  set({{"OMPI_COMM_WORLD_RANK", "3"},
       {"OMPI_COMM_WORLD_SIZE", "4"},
       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
       {"MASTER_ADDR", "node0"},
       {"MASTER_PORT", "4000"},
       {"SLURM_PROCID", "0"}});
  RankInfo info = rank_info_from_env();
  EXPECT_EQ(info.rank, 3);
  EXPECT_EQ(info.world_size, 4);
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_world_size, 2);
  EXPECT_EQ(info.launcher, "mpirun (Open MPI)");
}

TEST_F(RankEnv, OpenMpiWithoutMasterAddrSaysHowToExportIt) {
  set({{"OMPI_COMM_WORLD_RANK", "0"},
       {"OMPI_COMM_WORLD_SIZE", "2"},
       {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_TRUE(throws_with([] { rank_info_from_env(); }, {"MASTER_ADDR is not set", "mpirun -x MASTER_ADDR"}));
}

TEST_F(RankEnv, SlurmVariablesWithTasksPerNode) {
  set({{"SLURM_PROCID", "6"},
       {"SLURM_NTASKS", "8"},
       {"SLURM_LOCALID", "2"},
       {"SLURM_NTASKS_PER_NODE", "4"},
       {"SLURM_JOB_NODELIST", "gpu[07-08]"},
       {"MASTER_PORT", "29501"}});
  RankInfo info = rank_info_from_env();
  EXPECT_EQ(info.rank, 6);
  EXPECT_EQ(info.world_size, 8);
  EXPECT_EQ(info.local_rank, 2);
  EXPECT_EQ(info.local_world_size, 4);
  EXPECT_EQ(info.master_addr, "gpu07");  // the first node runs task 0
  EXPECT_EQ(info.launcher, "srun (SLURM)");
}

TEST_F(RankEnv, SlurmLocalSizeFromTheStepTaskList) {
  set({{"SLURM_PROCID", "4"},
       {"SLURM_NTASKS", "5"},
       {"SLURM_LOCALID", "0"},
       {"SLURM_STEP_TASKS_PER_NODE", "2(x2),1"},
       {"SLURM_TASKS_PER_NODE", "9"},
       {"SLURM_NODEID", "2"},
       {"SLURM_STEP_NODELIST", "a1,b[2-3]"},
       {"MASTER_ADDR", "explicit"},
       {"MASTER_PORT", "29501"}});
  RankInfo info = rank_info_from_env();
  EXPECT_EQ(info.local_world_size, 1);
  EXPECT_EQ(info.master_addr, "explicit");  // MASTER_ADDR wins over the node list
}

TEST_F(RankEnv, SlurmWithoutMasterPort) {
  set({{"SLURM_PROCID", "0"},
       {"SLURM_NTASKS", "1"},
       {"SLURM_LOCALID", "0"},
       {"SLURM_NTASKS_PER_NODE", "1"},
       {"SLURM_JOB_NODELIST", "n1"}});
  EXPECT_TRUE(throws_with([] { rank_info_from_env(); }, {"MASTER_PORT is not set", "srun (SLURM)", "29500"}));
}

TEST_F(RankEnv, NoLauncherNamesTheLaunchers) {
  EXPECT_TRUE(throws_with([] { rank_info_from_env(); }, {"no launcher variables", "RANK", "OMPI_COMM_WORLD_RANK",
                                                         "SLURM_PROCID", "ember-run --nproc-per-node"}));
}

TEST_F(RankEnv, MissingAndGarbledVariables) {
  set({{"RANK", "0"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}});
  EXPECT_TRUE(throws_with([] { rank_info_from_env(); }, {"WORLD_SIZE is not set", "ember-run/torchrun"}));
  set({{"WORLD_SIZE", "two"}});
  EXPECT_TRUE(throws_with([] { rank_info_from_env(); }, {"WORLD_SIZE='two'", "not an integer"}));
  set({{"WORLD_SIZE", "2"}, {"RANK", "2"}});
  EXPECT_TRUE(throws_with([] { rank_info_from_env(); }, {"RANK=2 is not below WORLD_SIZE=2"}));
  set({{"RANK", "-1"}});
  EXPECT_TRUE(throws_with([] { rank_info_from_env(); }, {"RANK='-1'"}));
  set({{"RANK", "1"}, {"LOCAL_RANK", "3"}, {"LOCAL_WORLD_SIZE", "2"}});
  EXPECT_TRUE(throws_with([] { rank_info_from_env(); }, {"LOCAL_RANK=3 is not below LOCAL_WORLD_SIZE=2"}));
  set({{"LOCAL_RANK", "1"}, {"MASTER_PORT", "65536"}});
  EXPECT_TRUE(throws_with([] { rank_info_from_env(); }, {"MASTER_PORT='65536'", "[1, 65535]"}));
  set({{"MASTER_PORT", "12x"}});
  EXPECT_TRUE(throws_with([] { rank_info_from_env(); }, {"MASTER_PORT='12x'"}));
  set({{"MASTER_PORT", "29500"}});
  unsetenv("MASTER_ADDR");
  EXPECT_TRUE(throws_with([] { rank_info_from_env(); }, {"MASTER_ADDR is not set", "host of rank 0"}));
  set({{"MASTER_ADDR", "a"}, {"OMPI_COMM_WORLD_RANK", "0"}});
  EXPECT_EQ(rank_info_from_env().rank, 1);  // complete again
}

TEST_F(RankEnv, OpenMpiMissingVariableNamesIt) {
  set({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"}, {"MASTER_PORT", "1"}});
  EXPECT_TRUE(
      throws_with([] { rank_info_from_env(); }, {"OMPI_COMM_WORLD_LOCAL_RANK is not set", "mpirun (Open MPI)"}));
}

TEST(SlurmLists, FirstHost) {
  using detail::first_slurm_host;
  EXPECT_EQ(first_slurm_host("node1"), "node1");
  EXPECT_EQ(first_slurm_host("node1,node2"), "node1");
  EXPECT_EQ(first_slurm_host("gpu[003-005,9],cpu1"), "gpu003");
  EXPECT_EQ(first_slurm_host("rack[2,4]-n"), "rack2-n");
  EXPECT_TRUE(throws_with([] { first_slurm_host("gpu[1-2"); }, {"SLURM node list", "gpu[1-2"}));
}

TEST(SlurmLists, TasksOnNode) {
  using detail::slurm_tasks_on_node;
  EXPECT_EQ(slurm_tasks_on_node("4", 0, "V"), 4);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 0, "V"), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 2, "V"), 2);
  EXPECT_EQ(slurm_tasks_on_node("2(x3),1", 3, "V"), 1);
  EXPECT_TRUE(throws_with([] { slurm_tasks_on_node("2(x3),1", 4, "V"); }, {"V='2(x3),1'", "lists 4 nodes"}));
  EXPECT_TRUE(throws_with([] { slurm_tasks_on_node("2(3)", 0, "V"); }, {"not a SLURM task list"}));
  EXPECT_TRUE(throws_with([] { slurm_tasks_on_node("a", 0, "V"); }, {"not a SLURM task list"}));
}

}  // namespace
}  // namespace ember::parallel
