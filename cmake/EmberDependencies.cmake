# Finds ember's dependencies on both kinds of machine: the CUDA toolkit's
# own tree (/usr/local/cuda, where cuDNN and NCCL may sit beside it) and
# Debian/Ubuntu's system paths (/usr/include, /usr/lib/x86_64-linux-gnu).
# A missing dependency stops configuration with its name and the package
# that provides it.
set(THREADS_PREFER_PTHREAD_FLAG ON)
find_package(Threads REQUIRED)

find_package(Eigen3 3.3 CONFIG QUIET)
if(NOT TARGET Eigen3::Eigen)
  message(FATAL_ERROR "ember: Eigen3 (CPU math) not found. Install it: apt-get install libeigen3-dev")
endif()

find_package(ZLIB QUIET)
if(NOT TARGET ZLIB::ZLIB)
  message(FATAL_ERROR "ember: zlib (gzip-compressed IDX files in data/) not found. Install it: apt-get install zlib1g-dev")
endif()

if(EMBER_WITH_CUDA)
  find_package(CUDAToolkit REQUIRED)
  set(EMBER_CUDA_HINTS ${CUDAToolkit_LIBRARY_ROOT} /usr/local/cuda /usr)
  find_path(EMBER_CUDNN_INCLUDE cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} PATHS ${EMBER_CUDA_HINTS} PATH_SUFFIXES include)
  find_library(EMBER_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} PATHS ${EMBER_CUDA_HINTS}
    PATH_SUFFIXES lib64 lib lib/x86_64-linux-gnu)
  if(NOT EMBER_CUDNN_INCLUDE OR NOT EMBER_CUDNN_LIBRARY)
    message(FATAL_ERROR "ember: cuDNN not found (cudnn.h: ${EMBER_CUDNN_INCLUDE}, libcudnn: ${EMBER_CUDNN_LIBRARY}). "
      "Install cuDNN 9 (e.g. apt-get install cudnn9-cuda-13) or configure with -DEMBER_WITH_CUDA=OFF")
  endif()
  add_library(ember_cudnn INTERFACE)
  target_include_directories(ember_cudnn INTERFACE ${EMBER_CUDNN_INCLUDE})
  target_link_libraries(ember_cudnn INTERFACE ${EMBER_CUDNN_LIBRARY})

  find_path(EMBER_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} PATHS ${EMBER_CUDA_HINTS} PATH_SUFFIXES include)
  find_library(EMBER_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} PATHS ${EMBER_CUDA_HINTS}
    PATH_SUFFIXES lib64 lib lib/x86_64-linux-gnu)
  if(NOT EMBER_NCCL_INCLUDE OR NOT EMBER_NCCL_LIBRARY)
    message(FATAL_ERROR "ember: NCCL not found (nccl.h: ${EMBER_NCCL_INCLUDE}, libnccl: ${EMBER_NCCL_LIBRARY}). "
      "Install NCCL 2 (e.g. apt-get install libnccl-dev) or configure with -DEMBER_WITH_CUDA=OFF")
  endif()
  add_library(ember_nccl INTERFACE)
  target_include_directories(ember_nccl INTERFACE ${EMBER_NCCL_INCLUDE})
  target_link_libraries(ember_nccl INTERFACE ${EMBER_NCCL_LIBRARY})
  message(STATUS "ember: CUDA ${CUDAToolkit_VERSION}, cuDNN ${EMBER_CUDNN_LIBRARY}, NCCL ${EMBER_NCCL_LIBRARY}, "
    "architectures ${CMAKE_CUDA_ARCHITECTURES}")
endif()

# Gloo: the CPU collectives of parallel/'s "gloo" backend. ON when found;
# asked for but missing is an error; OFF leaves parallel/distributed/backend/gloo_process_group.cpp
# out of the build (init_process_group("gloo") then says how to get it).
find_package(Gloo CONFIG QUIET)
if(TARGET gloo)
  set(EMBER_GLOO_DEFAULT ON)
else()
  set(EMBER_GLOO_DEFAULT OFF)
endif()
option(EMBER_WITH_GLOO "Build the gloo backend of parallel/ (CPU collectives)" ${EMBER_GLOO_DEFAULT})
if(EMBER_WITH_GLOO AND NOT TARGET gloo)
  message(FATAL_ERROR "ember: EMBER_WITH_GLOO=ON but Gloo was not found (its CMake config GlooConfig.cmake, "
    "e.g. /usr/share/cmake/Gloo). Install it: apt-get install libgloo-dev (or point CMAKE_PREFIX_PATH at "
    "a Gloo install), or configure with -DEMBER_WITH_GLOO=OFF")
endif()
if(EMBER_WITH_GLOO)
  message(STATUS "ember: Gloo ${Gloo_VERSION} (${Gloo_DIR})")
endif()

if(EMBER_BUILD_TESTS)
  find_package(GTest QUIET)
  if(NOT GTest_FOUND)
    message(FATAL_ERROR "ember: GoogleTest not found. Install it: apt-get install libgtest-dev "
      "(or configure with -DEMBER_BUILD_TESTS=OFF)")
  endif()
endif()
