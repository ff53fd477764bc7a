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
  find_path(EMBER_CUDNN_INCLUDE cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} PATHS ${EMBER_CUDA_HINTS}
    PATH_SUFFIXES include include/${CMAKE_LIBRARY_ARCHITECTURE})
  find_library(EMBER_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} PATHS ${EMBER_CUDA_HINTS}
    PATH_SUFFIXES lib64 lib lib/${CMAKE_LIBRARY_ARCHITECTURE})
  find_path(EMBER_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} PATHS ${EMBER_CUDA_HINTS} PATH_SUFFIXES include)
  find_library(EMBER_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} PATHS ${EMBER_CUDA_HINTS}
    PATH_SUFFIXES lib64 lib lib/${CMAKE_LIBRARY_ARCHITECTURE})
  # Everything missing in one message, with the two ways out: install it (or
  # point CMake at it), or build CPU-only.
  set(missing "")
  if(NOT EMBER_CUDNN_INCLUDE OR NOT EMBER_CUDNN_LIBRARY)
    string(APPEND missing "\n  cuDNN 9 (cudnn.h: ${EMBER_CUDNN_INCLUDE}, libcudnn: ${EMBER_CUDNN_LIBRARY}): e.g. "
      "apt-get install cudnn9-cuda-${CUDAToolkit_VERSION_MAJOR}, or -DEMBER_CUDNN_INCLUDE=<dir> "
      "-DEMBER_CUDNN_LIBRARY=<libcudnn.so>")
  endif()
  if(NOT EMBER_NCCL_INCLUDE OR NOT EMBER_NCCL_LIBRARY)
    string(APPEND missing "\n  NCCL 2 (nccl.h: ${EMBER_NCCL_INCLUDE}, libnccl: ${EMBER_NCCL_LIBRARY}): e.g. "
      "apt-get install libnccl-dev, or -DEMBER_NCCL_INCLUDE=<dir> -DEMBER_NCCL_LIBRARY=<libnccl.so>")
  endif()
  if(missing)
    set(where ${EMBER_CUDA_HINTS})
    list(REMOVE_DUPLICATES where)
    string(REPLACE ";" ", " where "${where}")
    message(FATAL_ERROR "ember: the CUDA backend (EMBER_WITH_CUDA=ON, nvcc "
      "${CMAKE_CUDA_COMPILER}) needs libraries that were not found under ${where} or the system "
      "paths:${missing}\nInstall them, or build CPU-only: cmake -S . -B build -DEMBER_WITH_CUDA=OFF "
      "(scripts/train.sh and scripts/demo.sh: EMBER_CMAKE_FLAGS=-DEMBER_WITH_CUDA=OFF scripts/train.sh). "
      "An existing build directory keeps its choice until reconfigured with the flag")
  endif()
  add_library(ember_cudnn INTERFACE)
  target_include_directories(ember_cudnn INTERFACE ${EMBER_CUDNN_INCLUDE})
  target_link_libraries(ember_cudnn INTERFACE ${EMBER_CUDNN_LIBRARY})

  add_library(ember_nccl INTERFACE)
  target_include_directories(ember_nccl INTERFACE ${EMBER_NCCL_INCLUDE})
  target_link_libraries(ember_nccl INTERFACE ${EMBER_NCCL_LIBRARY})
  message(STATUS "ember: CUDA ${CUDAToolkit_VERSION}, cuDNN ${EMBER_CUDNN_LIBRARY}, NCCL ${EMBER_NCCL_LIBRARY}, "
    "architectures ${CMAKE_CUDA_ARCHITECTURES}")
endif()

# Gloo: the CPU collectives of parallel/'s "gloo" backend. ON when found;
# asked for but missing is an error; OFF leaves ember/parallel/distributed/backend/gloo_process_group.cpp
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
