# ember's public headers are exactly those its umbrella header reaches:
# ember.h and every header it includes, transitively, through
# `#include "..."` lines naming files of the source tree. Everything else
# (kernel launchers, CUDA/cuDNN/NCCL wrappers, the store's wire protocol,
# sockets, backends) is internal: never installed, never included by a
# public header. A header becomes public by being included from the umbrella
# (or from a public header); nothing else needs listing.
#
# ember_public_headers(<out-var> <umbrella>) sets <out-var> to those paths,
# relative to the source directory, and makes CMake configure again when one
# of them changes (so a new include is picked up).
function(ember_public_headers out umbrella)
  set(todo ${umbrella})
  set(found)
  while(todo)
    list(POP_FRONT todo header)
    if(header IN_LIST found)
      continue()
    endif()
    list(APPEND found ${header})
    set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
      ${PROJECT_SOURCE_DIR}/${header})
    file(STRINGS ${PROJECT_SOURCE_DIR}/${header} includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"[^\"]+\"")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([^\"]+)\".*" "\\1" included "${line}")
      if(EXISTS ${PROJECT_SOURCE_DIR}/${included})
        list(APPEND todo ${included})
      endif()
    endforeach()
  endwhile()
  set(${out} ${found} PARENT_SCOPE)
endfunction()
