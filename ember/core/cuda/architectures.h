// The GPU architectures this ember was compiled for, and the error for a GPU
// it has no kernels for. Public; includes no CUDA header, and works in an
// ember built without CUDA (where the build's list is empty).
//
// Contract:
// - built_architectures() is CMAKE_CUDA_ARCHITECTURES as the build resolved
//   it, entries separated by ';' ("75-real;80-real;86-real;89-real;90"), or
//   "" without CUDA.
// - An entry "NN" or "NN-real" puts SASS for sm_NN into the library; "NN" or
//   "NN-virtual" puts PTX for compute_NN. A GPU of compute capability X.Y
//   runs SASS of the same major version X and a minor <= Y ("NNa" entries
//   only on exactly that X.Y), and PTX of any compute capability <= X.Y (the
//   driver compiles it when the program loads).
// - architectures_cover(built, major, minor) applies those rules: true or
//   false, or nullopt when the list holds a word CMake resolves itself
//   (native, all, all-major).
// - no_kernel_image_message(...) is the ember::Error text for GPU `device`
//   when the build has no kernel image for it: the GPU, its capability, the
//   build's list (with what each entry provides) and the CMake flag that
//   fixes it. The first allocation on a GPU checks (ember/core/cuda/kernel_image.h),
//   and a kernel launch that fails for that reason reports it too.
#pragma once

#include <optional>
#include <string>

namespace ember::cuda {

std::string built_architectures();

// "sm_75, sm_80 and sm_90 + PTX compute_90" for "75-real;80-real;90".
std::string describe_architectures(const std::string& built);

std::optional<bool> architectures_cover(const std::string& built, int major, int minor);

std::string no_kernel_image_message(int device, const std::string& gpu_name, int major, int minor,
                                    const std::string& built);

}  // namespace ember::cuda
