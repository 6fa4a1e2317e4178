# Generates version.cpp at build time so the git commit in provenance is the one that was built.
set(LORABENCH_VERSION_IN "${CMAKE_CURRENT_LIST_DIR}/version.cpp.in")
set(LORABENCH_VERSION_CPP "${CMAKE_BINARY_DIR}/generated/version.cpp")
add_custom_target(lorabench_version_gen
  COMMAND ${CMAKE_COMMAND}
          -DSRC_DIR=${CMAKE_SOURCE_DIR} -DIN=${LORABENCH_VERSION_IN} -DOUT=${LORABENCH_VERSION_CPP}
          -DVERSION=${PROJECT_VERSION}
          -P ${CMAKE_CURRENT_LIST_DIR}/LorabenchVersionGen.cmake
  BYPRODUCTS ${LORABENCH_VERSION_CPP}
  COMMENT "" VERBATIM)
