#include "lorabench/comm/control.hpp"

#include <chrono>
#include <thread>

#include "lorabench/core/error.hpp"
#include "lorabench/core/mpi_session.hpp"
#include "lorabench/core/strings.hpp"

namespace lorabench::comm {

namespace {
double reduce(MPI_Comm comm, double x, MPI_Op op) {
  LB_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, op, comm));
  return x;
}
}  // namespace

double allreduce_sum(MPI_Comm comm, double x) { return reduce(comm, x, MPI_SUM); }
double allreduce_max(MPI_Comm comm, double x) { return reduce(comm, x, MPI_MAX); }
double allreduce_min(MPI_Comm comm, double x) { return reduce(comm, x, MPI_MIN); }

int64_t allreduce_sum(MPI_Comm comm, int64_t x) {
  LB_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_INT64_T, MPI_SUM, comm));
  return x;
}

void allreduce_sum(MPI_Comm comm, std::vector<double>& v) {
  LB_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.size()), MPI_DOUBLE, MPI_SUM, comm));
}

std::vector<double> gather_to_root(MPI_Comm comm, const std::vector<double>& values) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::vector<double> out(rank == 0 ? values.size() * static_cast<size_t>(size) : 0);
  LB_MPI_CHECK(MPI_Gather(values.data(), static_cast<int>(values.size()), MPI_DOUBLE, out.data(),
                          static_cast<int>(values.size()), MPI_DOUBLE, 0, comm));
  return out;
}

std::vector<std::vector<double>> gatherv_to_root(MPI_Comm comm, const std::vector<double>& values) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int n = static_cast<int>(values.size());
  std::vector<int> counts(rank == 0 ? size : 0), displs(rank == 0 ? size : 0);
  LB_MPI_CHECK(MPI_Gather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm));
  int total = 0;
  for (int r = 0; r < static_cast<int>(counts.size()); ++r) {
    displs[r] = total;
    total += counts[r];
  }
  std::vector<double> all(static_cast<size_t>(total));
  LB_MPI_CHECK(MPI_Gatherv(values.data(), n, MPI_DOUBLE, all.data(), counts.data(), displs.data(), MPI_DOUBLE, 0,
                           comm));
  std::vector<std::vector<double>> out;
  for (int r = 0; r < static_cast<int>(counts.size()); ++r)
    out.emplace_back(all.begin() + displs[r], all.begin() + displs[r] + counts[r]);
  return out;
}

std::string broadcast_string(MPI_Comm comm, const std::string& s, int root) {
  long long n = static_cast<long long>(s.size());
  LB_MPI_CHECK(MPI_Bcast(&n, 1, MPI_LONG_LONG, root, comm));
  std::string out = s;
  out.resize(static_cast<size_t>(n));
  if (n > 0) LB_MPI_CHECK(MPI_Bcast(out.data(), static_cast<int>(n), MPI_CHAR, root, comm));
  return out;
}

std::string read_on_root(MPI_Comm comm, const std::string& path) {
  int rank = 0;
  LB_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  std::string text, error;
  if (rank == 0) {
    try {
      text = read_file(path);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (!broadcast_status(comm, error.empty(), error)) throw IoError(error);
  return broadcast_string(comm, text);
}

void quiet_barrier(MPI_Comm comm) {
  MPI_Request req;
  LB_MPI_CHECK(MPI_Ibarrier(comm, &req));
  int done = 0;
  for (;;) {
    LB_MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

bool agree_status(MPI_Comm comm, bool ok, std::string& message) {
  int rank = 0, size = 1;
  LB_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  LB_MPI_CHECK(MPI_Comm_size(comm, &size));
  int mine = ok ? size : rank, first = size;
  LB_MPI_CHECK(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
  if (first == size) return true;
  const std::string out = broadcast_string(comm, message, first);
  message = first == 0 ? out : "rank " + std::to_string(first) + ": " + out;
  return false;
}

std::vector<std::string> allgather_strings(MPI_Comm comm, const std::string& s) {
  int size = 1;
  LB_MPI_CHECK(MPI_Comm_size(comm, &size));
  int n = static_cast<int>(s.size());
  std::vector<int> lens(static_cast<size_t>(size)), offs(static_cast<size_t>(size));
  LB_MPI_CHECK(MPI_Allgather(&n, 1, MPI_INT, lens.data(), 1, MPI_INT, comm));
  int total = 0;
  for (int r = 0; r < size; ++r) {
    offs[size_t(r)] = total;
    total += lens[size_t(r)];
  }
  std::string all(static_cast<size_t>(total), '\0');
  LB_MPI_CHECK(MPI_Allgatherv(s.data(), n, MPI_CHAR, all.data(), lens.data(), offs.data(), MPI_CHAR, comm));
  std::vector<std::string> out;
  for (int r = 0; r < size; ++r) out.push_back(all.substr(size_t(offs[size_t(r)]), size_t(lens[size_t(r)])));
  return out;
}

bool broadcast_status(MPI_Comm comm, bool ok, std::string& message) {
  int flag = ok ? 1 : 0;
  LB_MPI_CHECK(MPI_Bcast(&flag, 1, MPI_INT, 0, comm));
  message = broadcast_string(comm, message);
  return flag != 0;
}

void agree_io(MPI_Comm comm, const std::string& error) {
  std::string message = error;
  if (!agree_status(comm, error.empty(), message)) throw AgreedIoError(message);
}

void agreed_writes(MPI_Comm comm, const std::function<void()>& f) {
  std::string error;
  try {
    f();
  } catch (const std::exception& e) {
    error = e.what();
    if (error.empty()) error = "write failed";
  }
  agree_io(comm, error);
}

}  // namespace lorabench::comm
