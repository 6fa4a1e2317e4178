# libtorch: the official one (a PyTorch wheel's, or the libtorch archive), never a distribution's.
#
# LORABENCH_TORCH names it, in one variable; any of
#   - a virtual environment (holds bin/python with torch installed),
#   - a python interpreter with torch installed,
#   - a libtorch directory (the archive from pytorch.org: holds share/cmake/Torch),
#   - a directory holding TorchConfig.cmake (torch.utils.cmake_prefix_path + /Torch).
# Default: the venv scripts/install-deps.sh fills ($ENV{LORABENCH_VENV}, else
# ${XDG_CACHE_HOME:-~/.cache}/lorabench/torch-<version>). A Torch_DIR or CMAKE_PREFIX_PATH given by the user
# (e.g. by `module load pytorch`) wins over the default when LORABENCH_TORCH is not set.
#
# Results:
#   lorabench::torch            the target every torch-facing library links
#   LORABENCH_TORCH_VERSION     e.g. 2.14.1
#   LORABENCH_TORCH_PREFIX      libtorch's install prefix (include/, lib/, share/cmake/)
#   LORABENCH_TORCH_CUDA        ON when libtorch is a CUDA build AND the CUDA toolkit was found, i.e. when
#                               lorabench compiles its CUDA parts; a CUDA libtorch without a toolkit gives
#                               a CPU-only build (torch_cpu + c10 only), said so in the feature summary
#   LORABENCH_TORCH_HAS_CUDA    ON when libtorch itself is a CUDA build
#   LORABENCH_TORCH_CXX_STANDARD, LORABENCH_TORCH_CXX11_ABI   what libtorch was built with; every target of
#                               the project is compiled the same way (set in the top-level CMakeLists)
#   LORABENCH_TORCH_SITE        the site-packages holding torch (wheel installs only): nvidia/* wheels live
#                               beside it (NCCL, cuDNN, the CUDA runtime libtorch loads)

file(STRINGS "${PROJECT_SOURCE_DIR}/scripts/torch-version.env" _tv REGEX "^LORABENCH_TORCH_VERSION=")
string(REGEX REPLACE "^LORABENCH_TORCH_VERSION=" "" LORABENCH_TORCH_TESTED "${_tv}")

# The venv path comes from the script install-deps.sh uses, so the two never disagree.
set(_torch_default "")
if(NOT DEFINED LORABENCH_TORCH AND NOT DEFINED Torch_DIR AND NOT CMAKE_PREFIX_PATH)
  execute_process(COMMAND "${PROJECT_SOURCE_DIR}/scripts/torch-venv.sh" OUTPUT_VARIABLE _torch_default
                  OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
endif()   # else the user's LORABENCH_TORCH / Torch_DIR / CMAKE_PREFIX_PATH decides
set(LORABENCH_TORCH "${_torch_default}" CACHE PATH
    "libtorch to build against: a venv, a python with torch, a libtorch directory, or a TorchConfig.cmake directory")

# Resolve LORABENCH_TORCH to the directory holding TorchConfig.cmake.
set(_torch_cfg_dir "")
if(LORABENCH_TORCH)
  set(_py "")
  if(IS_DIRECTORY "${LORABENCH_TORCH}" AND EXISTS "${LORABENCH_TORCH}/bin/python")
    set(_py "${LORABENCH_TORCH}/bin/python")
  elseif(NOT IS_DIRECTORY "${LORABENCH_TORCH}" AND EXISTS "${LORABENCH_TORCH}")
    set(_py "${LORABENCH_TORCH}")
  endif()
  if(_py)
    # Only the package's location: importing torch would load ~1 GB of libraries per configure.
    execute_process(
      COMMAND "${_py}" -c "import importlib.util, os; s = importlib.util.find_spec('torch'); print(os.path.dirname(s.origin))"
      OUTPUT_VARIABLE _torch_pkg OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc ERROR_QUIET)
    if(NOT _rc EQUAL 0 OR NOT EXISTS "${_torch_pkg}/share/cmake/Torch/TorchConfig.cmake")
      message(FATAL_ERROR "LORABENCH_TORCH=${LORABENCH_TORCH}: ${_py} has no torch with CMake files "
                          "(run scripts/install-deps.sh, or point LORABENCH_TORCH at a libtorch)")
    endif()
    set(_torch_cfg_dir "${_torch_pkg}/share/cmake/Torch")
  elseif(EXISTS "${LORABENCH_TORCH}/share/cmake/Torch/TorchConfig.cmake")
    set(_torch_cfg_dir "${LORABENCH_TORCH}/share/cmake/Torch")
  elseif(EXISTS "${LORABENCH_TORCH}/TorchConfig.cmake")
    set(_torch_cfg_dir "${LORABENCH_TORCH}")
  elseif(EXISTS "${LORABENCH_TORCH}/Torch/TorchConfig.cmake")
    set(_torch_cfg_dir "${LORABENCH_TORCH}/Torch")
  else()
    message(FATAL_ERROR "LORABENCH_TORCH=${LORABENCH_TORCH} holds no libtorch: run scripts/install-deps.sh "
                        "(it creates that venv), or set LORABENCH_TORCH to a venv, a python with torch, or a "
                        "libtorch directory")
  endif()
else()
  find_file(_torch_cfg_file TorchConfig.cmake PATH_SUFFIXES share/cmake/Torch Torch NO_CACHE)
  if(Torch_DIR)
    set(_torch_cfg_dir "${Torch_DIR}")
  elseif(_torch_cfg_file)
    get_filename_component(_torch_cfg_dir "${_torch_cfg_file}" DIRECTORY)
  else()
    message(FATAL_ERROR "no libtorch found on CMAKE_PREFIX_PATH; set LORABENCH_TORCH (see README)")
  endif()
endif()
get_filename_component(LORABENCH_TORCH_PREFIX "${_torch_cfg_dir}/../../.." ABSOLUTE)
# A wheel's torch/ sits in site-packages beside the nvidia/* wheels it loads.
set(LORABENCH_TORCH_SITE "")
if(EXISTS "${LORABENCH_TORCH_PREFIX}/../nvidia")
  get_filename_component(LORABENCH_TORCH_SITE "${LORABENCH_TORCH_PREFIX}/.." ABSOLUTE)
endif()

# Version: TorchConfigVersion.cmake sits beside TorchConfig.cmake.
include("${_torch_cfg_dir}/TorchConfigVersion.cmake")
set(LORABENCH_TORCH_VERSION "${PACKAGE_VERSION}")
unset(PACKAGE_VERSION)
if(LORABENCH_TORCH_VERSION VERSION_LESS 2.4)
  message(FATAL_ERROR "libtorch ${LORABENCH_TORCH_VERSION} at ${LORABENCH_TORCH_PREFIX} is too old: lorabench implements "
                      "the c10::Allocator interface of 2.4+ (non-const allocate, copy_data); tested: ${LORABENCH_TORCH_TESTED}")
endif()
if(NOT LORABENCH_TORCH_VERSION VERSION_EQUAL LORABENCH_TORCH_TESTED)
  message(WARNING "libtorch ${LORABENCH_TORCH_VERSION} (tested: ${LORABENCH_TORCH_TESTED}); docs/build.md says what should work")
endif()

# How libtorch was compiled. The C++ standard is the one TorchConfig.cmake puts on its target (libtorch
# headers need it); the ABI is read off libc10's exported symbols, which works for wheels and archives.
file(STRINGS "${_torch_cfg_dir}/TorchConfig.cmake" _std_line REGEX "CXX_STANDARD [0-9]+")
string(REGEX MATCH "[0-9]+" LORABENCH_TORCH_CXX_STANDARD "${_std_line}")
if(NOT LORABENCH_TORCH_CXX_STANDARD)
  set(LORABENCH_TORCH_CXX_STANDARD 17)
endif()
find_library(_c10_lib c10 PATHS "${LORABENCH_TORCH_PREFIX}/lib" NO_DEFAULT_PATH NO_CACHE REQUIRED)
find_program(_nm nm REQUIRED)
execute_process(COMMAND "${_nm}" -D --defined-only "${_c10_lib}" OUTPUT_VARIABLE _c10_syms ERROR_QUIET)
string(FIND "${_c10_syms}" "__cxx11" _cxx11_at)
if(_cxx11_at GREATER -1)
  set(LORABENCH_TORCH_CXX11_ABI 1)
else()
  set(LORABENCH_TORCH_CXX11_ABI 0)
endif()
unset(_c10_syms)

set(LORABENCH_TORCH_HAS_CUDA OFF)
if(EXISTS "${LORABENCH_TORCH_PREFIX}/lib/libtorch_cuda.so")
  set(LORABENCH_TORCH_HAS_CUDA ON)
endif()

# A CUDA libtorch's own CMake files need the CUDA toolkit (nvcc, headers). With one, take them as they are;
# without one, import the CPU libraries directly: a CPU-only build of lorabench, never a failed configure.
set(LORABENCH_TORCH_CUDA OFF)
set(LORABENCH_CPU_ONLY_REASON "libtorch is a CPU build")   # for the feature summary
if(LORABENCH_TORCH_HAS_CUDA AND LORABENCH_WITH_CUDA STREQUAL "OFF")
  set(LORABENCH_CPU_ONLY_REASON "LORABENCH_WITH_CUDA=OFF")
elseif(LORABENCH_TORCH_HAS_CUDA)
  find_package(CUDAToolkit QUIET)
  set(LORABENCH_CPU_ONLY_REASON "libtorch is a CUDA build, but no CUDA toolkit (nvcc) was found")
  if(CUDAToolkit_FOUND AND CUDAToolkit_NVCC_EXECUTABLE)
    set(LORABENCH_TORCH_CUDA ON)
  elseif(LORABENCH_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "LORABENCH_WITH_CUDA=ON but no CUDA toolkit (nvcc) was found: set CUDAToolkit_ROOT "
                        "or put nvcc on PATH (module load cuda)")
  endif()
elseif(LORABENCH_WITH_CUDA STREQUAL "ON")
  message(FATAL_ERROR "LORABENCH_WITH_CUDA=ON but libtorch at ${LORABENCH_TORCH_PREFIX} is a CPU-only build")
endif()

add_library(lorabench::torch INTERFACE IMPORTED GLOBAL)
# libtorch's wheels carry a static copy of part of libstdc++ (std::filesystem, from the GCC they were built
# with) and export it: 2.14.1's libtorch_cpu.so and 2.11.0's libtorch.so do. The compiler driver adds the
# system libstdc++ after every library on the link line, so the dynamic linker, which searches an
# executable's DT_NEEDED libraries in order, bound lorabench's own std::filesystem calls to libtorch's copy:
# harmless with 2.14.1, a call through a null pointer in 2.11.0's remove_all (lorabench doctor, run.overwrite,
# checkpoint pruning crashed). Naming libstdc++ before libtorch makes it the first library searched.
# Test: LinkOrder.StdFilesystemComesFromLibstdcxx.
target_link_libraries(lorabench::torch INTERFACE "-Wl,--push-state,--no-as-needed" stdc++ "-Wl,--pop-state")
if(LORABENCH_TORCH_CUDA)
  # The toolkit's nvcc must be the one libtorch's CUDA files see (they compare versions).
  if(NOT CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_COMPILER "${CUDAToolkit_NVCC_EXECUTABLE}")
  endif()
  # libtorch's files use the old FindCUDA, which guesses the toolkit root from PATH: tell it.
  if(NOT CUDA_TOOLKIT_ROOT_DIR)
    get_filename_component(CUDA_TOOLKIT_ROOT_DIR "${CUDAToolkit_BIN_DIR}" DIRECTORY)
  endif()
  # The architectures libtorch's CUDA flags name (its files ignore CMAKE_CUDA_ARCHITECTURES): A100 and
  # H100/H200, plus PTX for newer GPUs; override with -DTORCH_CUDA_ARCH_LIST=...
  if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(TORCH_CUDA_ARCH_LIST "8.0;9.0+PTX")
  endif()
  find_package(Torch REQUIRED PATHS "${_torch_cfg_dir}" NO_DEFAULT_PATH)
  target_link_libraries(lorabench::torch INTERFACE torch)
else()
  foreach(_lib torch_cpu c10)
    find_library(LORABENCH_${_lib}_LIBRARY ${_lib} PATHS "${LORABENCH_TORCH_PREFIX}/lib" NO_DEFAULT_PATH REQUIRED)
  endforeach()
  target_include_directories(lorabench::torch SYSTEM INTERFACE
    "${LORABENCH_TORCH_PREFIX}/include" "${LORABENCH_TORCH_PREFIX}/include/torch/csrc/api/include")
  target_link_libraries(lorabench::torch INTERFACE ${LORABENCH_torch_cpu_LIBRARY} ${LORABENCH_c10_LIBRARY})
endif()
