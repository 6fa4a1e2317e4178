// The MPI backend: collectives on host memory with MPI's non-blocking collectives (MPI_Iallreduce, ...).
// bf16 and fp16 travel as 2-byte elements reduced by user-defined MPI operations (each pairwise step
// converts to fp32, combines and rounds back to the 16-bit type).
#pragma once

#include <mpi.h>

#include <memory>

#include "lorabench/comm/communicator.hpp"

namespace lorabench::comm {

// Duplicates `comm` (so lorabench's traffic never matches a user's messages) and owns the duplicate.
// Collective over `comm`. progress() tests the outstanding requests of this communicator.
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm);

// The MPI datatype and reduction the backend uses for `t` (user-defined for bf16/fp16), so a caller can
// issue the same operation with raw MPI (lorabench comm times MPI_Allreduce etc. beside the layer).
// REQUIRES: MPI is initialised. The handles live until MPI_Finalize; do not free them.
MPI_Datatype mpi_datatype(DataType t);
MPI_Op mpi_reduce_op(DataType t, ReduceOp op);

}  // namespace lorabench::comm
