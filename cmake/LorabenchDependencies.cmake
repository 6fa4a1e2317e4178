# Required and optional dependencies. Each optional feature resolves to LORABENCH_HAVE_<X> ON/OFF.

find_package(MPI REQUIRED COMPONENTS C CXX)
# Debian's parallel HDF5 (openmpi flavour). HDF5::HDF5 lacks MPI's include path: link MPI too.
set(HDF5_PREFER_PARALLEL ON)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "lorabench needs a parallel (MPI) HDF5, e.g. Debian's libhdf5-openmpi-dev")
endif()
find_package(Boost 1.71 REQUIRED COMPONENTS program_options)
find_package(nlohmann_json 3.9 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
find_path(UTF8PROC_INCLUDE_DIR utf8proc.h REQUIRED)
find_library(UTF8PROC_LIBRARY utf8proc REQUIRED)
add_library(lorabench_utf8proc INTERFACE)
target_include_directories(lorabench_utf8proc INTERFACE ${UTF8PROC_INCLUDE_DIR})
target_link_libraries(lorabench_utf8proc INTERFACE ${UTF8PROC_LIBRARY})

# libtorch: Debian's libtorch-dev, or any libtorch (a CUDA build) through CMAKE_PREFIX_PATH.
find_package(Torch REQUIRED)
set(LORABENCH_TORCH_VERSION "${Torch_VERSION}")

function(lorabench_resolve_feature name found)
  set(mode "${LORABENCH_WITH_${name}}")
  if(mode STREQUAL "OFF")
    set(LORABENCH_HAVE_${name} OFF PARENT_SCOPE)
  elseif(found)
    set(LORABENCH_HAVE_${name} ON PARENT_SCOPE)
  elseif(mode STREQUAL "ON")
    message(FATAL_ERROR "LORABENCH_WITH_${name}=ON but ${name} was not found")
  else()
    set(LORABENCH_HAVE_${name} OFF PARENT_SCOPE)
  endif()
endfunction()

# PAPI
set(_papi_found OFF)
if(NOT LORABENCH_WITH_PAPI STREQUAL "OFF")
  pkg_check_modules(PAPI IMPORTED_TARGET papi)
  if(PAPI_FOUND)
    set(_papi_found ON)
  endif()
endif()
lorabench_resolve_feature(PAPI ${_papi_found})

# NCCL (+ CUDA runtime). The communicator backend is torch-free, so it builds wherever the CUDA
# toolkit and nccl.h exist, GPU or not.
set(_nccl_found OFF)
if(NOT LORABENCH_WITH_NCCL STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_HOME PATH_SUFFIXES lib lib64)
  if(CUDAToolkit_FOUND AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(_nccl_found ON)
    add_library(lorabench_nccl INTERFACE)
    target_include_directories(lorabench_nccl INTERFACE ${NCCL_INCLUDE_DIR})
    target_link_libraries(lorabench_nccl INTERFACE ${NCCL_LIBRARY} CUDA::cudart)
  endif()
endif()
lorabench_resolve_feature(NCCL ${_nccl_found})

# GoogleTest (Debian's libgtest-dev ships the CMake package).
if(LORABENCH_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
