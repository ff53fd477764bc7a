# The default of CMAKE_CUDA_ARCHITECTURES, the GPU architectures ember's
# kernels are compiled for. Included before enable_language(CUDA), and only
# when neither -DCMAKE_CUDA_ARCHITECTURES nor the CUDAARCHS environment
# variable chose them:
# - GPUs visible to nvidia-smi on the building machine: their compute
#   capabilities, as numbers (8.6 -> 86) rather than CMake's word "native",
#   so that the build knows its own list (the runtime check of
#   ember/core/cuda/architectures.h names it when a GPU has no kernel image);
# - no GPU (a CI machine, a container without one): EMBER_DEFAULT_CUDA_ARCHITECTURES,
#   SASS for the Turing, Ampere, Ada and Hopper GPUs users run, and PTX of the
#   newest ("90" = 90-real + 90-virtual) that the driver compiles for later
#   GPUs (Blackwell) when the program loads.
# Architectures this nvcc cannot compile (older than its oldest, newer than
# its newest) are dropped with a warning. The choice is cached: a fresh build
# directory detects again; -DCMAKE_CUDA_ARCHITECTURES=... overrides it.
set(EMBER_DEFAULT_CUDA_ARCHITECTURES 75-real 80-real 86-real 89-real 90)

# The architectures this nvcc compiles for ("75;80;86;..."), empty when it
# cannot list them (nvcc before 11.6).
function(ember_nvcc_architectures out)
  execute_process(COMMAND ${CMAKE_CUDA_COMPILER} --list-gpu-arch OUTPUT_VARIABLE listed RESULT_VARIABLE rc
    ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(archs "")
  if(rc EQUAL 0)
    string(REGEX MATCHALL "compute_[0-9]+" computes "${listed}")
    foreach(c IN LISTS computes)
      string(REPLACE "compute_" "" n ${c})
      list(APPEND archs ${n})
    endforeach()
  endif()
  set(${out} "${archs}" PARENT_SCOPE)
endfunction()

# The compute capabilities of the GPUs nvidia-smi sees ("86;90"), empty when
# there are none or nvidia-smi is missing or too old to report them.
function(ember_visible_gpu_architectures out)
  find_program(EMBER_NVIDIA_SMI nvidia-smi)
  set(archs "")
  if(EMBER_NVIDIA_SMI)
    execute_process(COMMAND ${EMBER_NVIDIA_SMI} --query-gpu=compute_cap --format=csv,noheader
      OUTPUT_VARIABLE listed RESULT_VARIABLE rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE TIMEOUT 20)
    if(rc EQUAL 0)
      string(REGEX MATCHALL "[0-9]+\\.[0-9]+" caps "${listed}")
      foreach(cap IN LISTS caps)
        string(REPLACE "." "" n ${cap})
        list(APPEND archs ${n})
      endforeach()
      list(REMOVE_DUPLICATES archs)
      list(SORT archs COMPARE NATURAL)
    endif()
  endif()
  set(${out} "${archs}" PARENT_SCOPE)
endfunction()

function(ember_choose_cuda_architectures)
  ember_nvcc_architectures(supported)
  ember_visible_gpu_architectures(gpus)
  if(gpus)
    set(wanted ${gpus})
    set(why "the GPUs of this machine, from nvidia-smi")
  else()
    set(wanted ${EMBER_DEFAULT_CUDA_ARCHITECTURES})
    set(why "no GPU visible to nvidia-smi, so ember's default list")
  endif()
  set(chosen "")
  foreach(arch IN LISTS wanted)
    string(REGEX REPLACE "-.*" "" n ${arch})
    if(NOT supported OR n IN_LIST supported)
      list(APPEND chosen ${arch})
    else()
      message(WARNING "ember: this nvcc (${CMAKE_CUDA_COMPILER}) cannot compile for sm_${n} (it knows ${supported}); "
        "leaving it out. A GPU of compute capability ${n} then needs another CUDA toolkit")
    endif()
  endforeach()
  if(NOT chosen)
    message(FATAL_ERROR "ember: none of the architectures ${wanted} (${why}) can be compiled by ${CMAKE_CUDA_COMPILER}, "
      "which knows ${supported}. Choose some with -DCMAKE_CUDA_ARCHITECTURES=..., use a CUDA toolkit that supports "
      "these GPUs, or configure a CPU-only build with -DEMBER_WITH_CUDA=OFF")
  endif()
  set(CMAKE_CUDA_ARCHITECTURES "${chosen}" CACHE STRING
    "GPU architectures ember compiles its kernels for (e.g. 80;90, native)")
  message(STATUS "ember: CUDA architectures ${chosen} (${why}); choose others with "
    "-DCMAKE_CUDA_ARCHITECTURES=\"80;90\" (or native, or the list \"${EMBER_DEFAULT_CUDA_ARCHITECTURES}\")")
endfunction()
