// ember/parallel/devices: CUDA_VISIBLE_DEVICES parsing, the logical -> physical
// mapping, set_visible_devices, free-GPU selection and their errors, on a
// fake machine; and the real NVML/CUDA probes where they exist.
#include "ember/core/cuda/devices.h"

#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "ember/core/cuda/device.h"
#include "fake_device_system.h"
#include "support/error_message.h"

namespace ember::cuda {
namespace {

using ember::testing::error_of;
using ember::testing::fake_gpu;
using ember::testing::fake_runtime;
using ember::testing::kMiB;
using ember::testing::ScopedDeviceSystem;
using ember::testing::throws_with;
using ::testing::HasSubstr;
using Kind = VisibleEntry::Kind;

TEST(CudaVisibleDevices, ParsesTheFormsCudaAccepts) {
  auto e = parse_visible_devices("1, 2,GPU-8f3e,MIG-GPU-8f3e/1/0");
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e[0].kind, Kind::Index);
  EXPECT_EQ(e[0].index, 1);
  EXPECT_EQ(e[1].index, 2);
  EXPECT_EQ(e[1].token, "2");
  EXPECT_EQ(e[2].kind, Kind::GpuUuid);
  EXPECT_EQ(e[2].token, "GPU-8f3e");
  EXPECT_EQ(e[3].kind, Kind::Mig);
  // CUDA stops at the first entry it cannot read: "-1" hides every GPU.
  EXPECT_TRUE(parse_visible_devices("-1,0").empty());
  EXPECT_EQ(parse_visible_devices("0,gpu1,1").size(), 1u);
  EXPECT_TRUE(parse_visible_devices("").empty());
}

// A 4-GPU machine where CUDA_VISIBLE_DEVICES picks physical GPUs 1 and 2.
void two_of_four(ScopedDeviceSystem& sys, bool with_nvml = true) {
  std::vector<PhysicalDevice> gpus;
  for (int i = 0; i < 4; ++i) gpus.push_back(fake_gpu(i, 0x10 + i, i == 0 ? 80000 : 3));
  sys->runtime = {fake_runtime(gpus[1]), fake_runtime(gpus[2])};
  if (with_nvml) sys->nvml = gpus;
  sys->env["CUDA_VISIBLE_DEVICES"] = "1,2";
}

TEST(CudaVisibleDevices, MapsLogicalToPhysicalByPciBusId) {
  ScopedDeviceSystem sys;
  two_of_four(sys);
  // The variable names the GPUs by UUID, in reverse order: the PCI bus ids
  // still find them.
  sys->runtime = {fake_runtime((*sys->nvml)[3]), fake_runtime((*sys->nvml)[1])};
  sys->env["CUDA_VISIBLE_DEVICES"] = (*sys->nvml)[3].uuid + "," + (*sys->nvml)[1].uuid;
  std::vector<VisibleDevice> v = visible_devices();
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].logical, 0);
  EXPECT_EQ(v[0].physical, 3);
  EXPECT_EQ(v[1].physical, 1);
  EXPECT_EQ(v[0].name, "NVIDIA H200");
  EXPECT_EQ(v[0].total_memory, size_t(143771) * kMiB);
  EXPECT_EQ(v[0].pci_bus_id, "0000:13:00.0");
}

TEST(CudaVisibleDevices, WithoutNvmlFallsBackOnTheVariable) {
  ScopedDeviceSystem sys;
  two_of_four(sys, /*with_nvml=*/false);
  std::vector<VisibleDevice> v = visible_devices();
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].physical, 1);
  EXPECT_EQ(v[1].physical, 2);
  // A UUID cannot be mapped without NVML.
  sys->env["CUDA_VISIBLE_DEVICES"] = "GPU-1234,2";
  EXPECT_EQ(visible_devices()[0].physical, -1);
  EXPECT_EQ(visible_devices()[1].physical, 2);
  EXPECT_EQ(describe_visible_mapping(),
            "CUDA_VISIBLE_DEVICES=GPU-1234,2 maps physical GPUs GPU-1234,2 to logical ids 0,1");
  // Unset: logical ids are the physical ones.
  sys->env.clear();
  EXPECT_EQ(visible_devices()[1].physical, 1);
  EXPECT_EQ(describe_visible_mapping(), "CUDA_VISIBLE_DEVICES is unset, so logical ids 0,1 are physical GPUs 0,1");
}

TEST(CudaVisibleDevices, InvalidIdErrorExplainsTheMapping) {
  ScopedDeviceSystem sys;
  two_of_four(sys);
  EXPECT_NO_THROW(check_visible_device(1));
  EXPECT_THAT(error_of([] { check_visible_device(2); }),
              HasSubstr("Invalid device id 2: 2 CUDA devices are visible (CUDA_VISIBLE_DEVICES=1,2 maps physical GPUs "
                        "1,2 to logical ids 0,1); use ids in [0, 1]"));
  EXPECT_TRUE(throws_with([] { check_visible_device(-1); }, {"Invalid device id -1", "use ids in [0, 1]"}));
  sys->runtime.resize(1);
  EXPECT_TRUE(throws_with([] { check_visible_device(1); }, {"1 CUDA device is visible", "use id 0"}));
  // No GPU visible: a CUDA build names the GPUs NVML lists that the
  // variable hides; a CPU-only build says it has no CUDA.
  sys->runtime.clear();
  const std::string none = error_of([] { check_visible_device(0); });
  EXPECT_THAT(none, HasSubstr("Invalid device id 0: no CUDA device is visible"));
  EXPECT_THAT(none, ::testing::AnyOf(HasSubstr("CUDA_VISIBLE_DEVICES=\"1,2\" hides all 4 GPUs of this machine"),
                                     HasSubstr("(CUDA_VISIBLE_DEVICES=1,2; this ember was built without CUDA")));
}

TEST(CudaVisibleDevices, VariableThatHidesEveryGpuSaysSo) {
  ScopedDeviceSystem sys;
  sys->nvml = std::vector<PhysicalDevice>{fake_gpu(0, 0x10, 0), fake_gpu(1, 0x11, 0)};
  sys->env["CUDA_VISIBLE_DEVICES"] = "";
  const std::string why = "the CUDA runtime reports cudaErrorNoDevice: no CUDA-capable device is detected";
  const std::string m = invalid_device_message(0, 0, why);
  EXPECT_THAT(m, HasSubstr("Invalid device id 0: no CUDA device is visible: CUDA_VISIBLE_DEVICES=\"\" hides all 2 "
                           "GPUs of this machine, which NVML (nvidia-smi) lists:\n  GPU 0 (NVIDIA H200)"));
  EXPECT_THAT(m, HasSubstr("GPU 1 (NVIDIA H200)"));
  EXPECT_THAT(m, HasSubstr(why));
  EXPECT_THAT(m, HasSubstr("Unset CUDA_VISIBLE_DEVICES, or set it to GPUs of this machine (CUDA_VISIBLE_DEVICES=0,1 "
                           "for all of them)"));
  // An index the machine lacks hides its only GPU too.
  sys->nvml = std::vector<PhysicalDevice>{fake_gpu(0, 0x10, 0)};
  sys->env["CUDA_VISIBLE_DEVICES"] = "5";
  EXPECT_THAT(invalid_device_message(0, 0, why),
              HasSubstr("CUDA_VISIBLE_DEVICES=\"5\" hides the only GPU of this machine"));
#if EMBER_WITH_CUDA
  EXPECT_TRUE(throws_with([] { check_visible_device(0); }, {"hides the only GPU", "CUDA_VISIBLE_DEVICES=0 for all"}));
#endif
  // Unset, or NVML missing: nothing is known to be hidden; the runtime's reason.
  sys->env.clear();
  EXPECT_EQ(invalid_device_message(0, 0, why),
            "Invalid device id 0: no CUDA device is visible (CUDA_VISIBLE_DEVICES=unset; " + why +
                "). Run on a machine with an NVIDIA GPU and driver, or keep tensors on the CPU");
  sys->env["CUDA_VISIBLE_DEVICES"] = "";
  sys->nvml.reset();
  EXPECT_THAT(invalid_device_message(0, 0, why), HasSubstr("no CUDA device is visible (CUDA_VISIBLE_DEVICES=; "));
}

TEST(CudaVisibleDevices, IdBeyondTheOnlyGpuShowsTheMapping) {
  ScopedDeviceSystem sys;
  sys->nvml = std::vector<PhysicalDevice>{fake_gpu(0, 0x10, 0)};
  sys->runtime = {fake_runtime((*sys->nvml)[0])};
  EXPECT_EQ(invalid_device_message(5, 1, ""),
            "Invalid device id 5: 1 CUDA device is visible (CUDA_VISIBLE_DEVICES is unset, so logical ids 0 are "
            "physical GPUs 0); use id 0");
}

TEST(CudaVisibleDevices, CheckDeviceUsesTheSameMessage) {
  if (!is_available()) {
    EXPECT_TRUE(throws_with([] { check_device(0); }, {"Invalid device id 0: "}));
    GTEST_SKIP() << "no CUDA device: the message with devices needs one";
  }
  EXPECT_TRUE(throws_with(
      [] { check_device(device_count() + 4); },
      {"Invalid device id " + std::to_string(device_count() + 4), "visible (CUDA_VISIBLE_DEVICES", "logical ids 0"}));
}

TEST(CudaVisibleDevices, SetBeforeCudaInitializes) {
  ScopedDeviceSystem sys;
  sys->nvml = std::vector<PhysicalDevice>{fake_gpu(0, 1, 0), fake_gpu(1, 2, 0), fake_gpu(2, 3, 0)};
  set_visible_devices({1, 2});
  EXPECT_EQ(sys->env.at("CUDA_VISIBLE_DEVICES"), "1,2");
  EXPECT_EQ(sys->env.at("CUDA_DEVICE_ORDER"), "PCI_BUS_ID") << "so that the ids mean nvidia-smi's";
  sys->env["CUDA_DEVICE_ORDER"] = "FASTEST_FIRST";
  set_visible_devices({0});
  EXPECT_EQ(sys->env.at("CUDA_DEVICE_ORDER"), "FASTEST_FIRST") << "the user's choice is kept";

  EXPECT_TRUE(throws_with([] { set_visible_devices({1, 1}); }, {"GPU 1 is listed twice"}));
  EXPECT_TRUE(throws_with([] { set_visible_devices({-2}); }, {"non-negative", "-2"}));
  EXPECT_TRUE(throws_with([] { set_visible_devices({5}); }, {"there is no GPU 5", "GPU 2 (NVIDIA H200)"}));
}

TEST(CudaVisibleDevices, SetTooLateSaysWhyAndWhatToDo) {
  ScopedDeviceSystem sys;
  sys->initialized = true;
  sys->env["CUDA_VISIBLE_DEVICES"] = "0";
  EXPECT_TRUE(throws_with(
      [] {
        set_visible_devices({1, 2});
      },
      {"CUDA was already initialized", "CUDA_VISIBLE_DEVICES=1,2 would be ignored", "'0'", "before anything uses CUDA",
       "in the shell: CUDA_VISIBLE_DEVICES=1,2 ./your_program"}));
  EXPECT_EQ(sys->env.at("CUDA_VISIBLE_DEVICES"), "0");
  EXPECT_NO_THROW(set_visible_devices({0})) << "asking for what is already in effect is fine";
}

TEST(CudaFreeDevices, AvailableAndSelectedByMemoryUse) {
  ScopedDeviceSystem sys;
  sys->nvml =
      std::vector<PhysicalDevice>{fake_gpu(0, 1, 70000), fake_gpu(1, 2, 300), fake_gpu(2, 3, 2), fake_gpu(3, 4, 100)};
  EXPECT_EQ(available_devices(500), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(available_devices(0), (std::vector<int>{}));
  EXPECT_EQ(physical_devices()[0].used_memory, uint64_t(70000) * kMiB);
  // The two least used, in index order.
  EXPECT_EQ(select_free_devices(2, 500), (std::vector<int>{2, 3}));
  EXPECT_EQ(sys->env.at("CUDA_VISIBLE_DEVICES"), "2,3");
}

TEST(CudaFreeDevices, NoneQualifyListsEveryGpu) {
  ScopedDeviceSystem sys;
  sys->nvml = std::vector<PhysicalDevice>{fake_gpu(0, 1, 70000), fake_gpu(1, 2, 300)};
  const std::string m = error_of([] { select_free_devices(2, 500); });
  EXPECT_THAT(m, HasSubstr("asked for 2 GPUs using at most 500 MiB each, but only 1 of the 2 GPUs qualifies"));
  EXPECT_THAT(m, HasSubstr("GPU 0 (NVIDIA H200): 70000 MiB used of 143771 MiB, 50% utilization"));
  EXPECT_THAT(m, HasSubstr("GPU 1 (NVIDIA H200): 300 MiB used of 143771 MiB"));
  EXPECT_THAT(error_of([] { select_free_devices(1, 10); }), HasSubstr("but none of the 2 GPUs qualify"));
  EXPECT_TRUE(throws_with([] { select_free_devices(0, 10); }, {"ask for at least one"}));
  EXPECT_EQ(sys->env.count("CUDA_VISIBLE_DEVICES"), 0u) << "nothing is set when selection fails";
  sys->nvml.reset();
  EXPECT_TRUE(throws_with([] { available_devices(10); }, {"NVML is not usable"}));
}

// The real machine: in an ember without CUDA nothing initializes CUDA; with
// a GPU, ember's device queries do.
TEST(CudaVisibleDevices, RealInitializationProbe) {
#if EMBER_WITH_CUDA
  if (!is_available()) GTEST_SKIP() << "no CUDA device";
  EXPECT_TRUE(device_system().cuda_initialized());
  EXPECT_TRUE(throws_with(
      [] {
        set_visible_devices({0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
      },
      {"CUDA was already initialized"}));
  std::vector<VisibleDevice> v = visible_devices();
  ASSERT_EQ(v.size(), size_t(device_count()));
  EXPECT_EQ(v[0].name, properties(0).name);
  EXPECT_FALSE(v[0].pci_bus_id.empty());
#else
  EXPECT_FALSE(device_system().cuda_initialized());
  EXPECT_TRUE(visible_devices().empty());
  EXPECT_TRUE(throws_with([] { check_visible_device(0); }, {"no CUDA device is visible", "built without CUDA"}));
#endif
}

TEST(CudaFreeDevices, RealNvml) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (lib == nullptr) {
    EXPECT_TRUE(throws_with([] { physical_devices(); }, {"NVML is not usable", "libnvidia-ml.so.1"}));
    GTEST_SKIP() << "libnvidia-ml.so.1 is not installed";
  }
  dlclose(lib);
  std::vector<PhysicalDevice> gpus = physical_devices();
  ASSERT_FALSE(gpus.empty());
  for (const PhysicalDevice& g : gpus) {
    EXPECT_GT(g.total_memory, 0u) << g.name;
    EXPECT_LE(g.used_memory, g.total_memory) << g.name;
    EXPECT_FALSE(g.pci_bus_id.empty());
  }
  if (is_available()) {
    for (const VisibleDevice& v : visible_devices()) {
      EXPECT_GE(v.physical, 0) << "NVML matches every visible GPU by PCI bus id";
      EXPECT_LT(v.physical, int(gpus.size()));
    }
  }
}

}  // namespace
}  // namespace ember::cuda
