/* A failing-write shim for the I/O error tests (tests/e2e/io_errors_e2e.sh), loaded with LD_PRELOAD:
 * writes to files whose path contains $LB_FAILWRITE_MATCH fail with $LB_FAILWRITE_ERRNO (ENOSPC or EIO)
 * once $LB_FAILWRITE_AFTER bytes (default 0) have been written to such files by this process, as a full
 * disk or a failing device would. Only in the process whose $OMPI_COMM_WORLD_RANK (or $PMIX_RANK) equals
 * $LB_FAILWRITE_RANK, when that is set. Every other write goes to libc unchanged. LB_FAILWRITE_AFTER=-1
 * fails nothing and only counts: with $LB_FAILWRITE_REPORT set, the count is written there at exit (how a
 * test finds a budget that runs out in the middle of a run). LB_FAILWRITE_SPACE=N instead models a full
 * file system: the matching files may hold N bytes, and a write or an fallocate() that reaches past offset N
 * fails with ENOSPC (rewrites below N and reserved space succeed, as on a real disk). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static int g_init = 0, g_active = 0, g_errno = ENOSPC;
static const char* g_match = NULL;
static long long g_budget = 0, g_written = 0, g_space = -1;

static void init(void) {
  if (g_init) return;
  g_init = 1;
  g_match = getenv("LB_FAILWRITE_MATCH");
  if (g_match == NULL || *g_match == 0) return;
  const char* want = getenv("LB_FAILWRITE_RANK");
  if (want != NULL && *want != 0) {
    const char* rank = getenv("OMPI_COMM_WORLD_RANK");
    if (rank == NULL) rank = getenv("PMIX_RANK");
    if (rank == NULL || strcmp(rank, want) != 0) return;
  }
  const char* e = getenv("LB_FAILWRITE_ERRNO");
  if (e != NULL && strcmp(e, "EIO") == 0) g_errno = EIO;
  const char* space = getenv("LB_FAILWRITE_SPACE");
  if (space != NULL && *space != 0) g_space = atoll(space);
  const char* after = getenv("LB_FAILWRITE_AFTER");
  if (after != NULL) g_budget = atoll(after);
  g_active = 1;
}

/* 1 when fd is open on a file whose path contains $LB_FAILWRITE_MATCH (and the shim is active). */
static int matches(int fd) {
  init();
  if (!g_active) return 0;
  char link[64], path[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return 0;
  path[n] = 0;
  return strstr(path, g_match) != NULL;
}

/* 1 when this write (count bytes to fd at offset, -1: the file position) must fail. */
static int must_fail(int fd, size_t count, off_t offset) {
  if (!matches(fd)) return 0;
  if (g_space >= 0) {
    if (offset < 0) offset = lseek(fd, 0, SEEK_CUR);
    if ((long long)offset + (long long)count <= g_space) return 0;
    errno = ENOSPC;
    return 1;
  }
  if (g_budget < 0 || g_written + (long long)count <= g_budget) {
    g_written += (long long)count;
    return 0;
  }
  errno = g_errno;
  return 1;
}

__attribute__((destructor)) static void report(void) {
  const char* path = getenv("LB_FAILWRITE_REPORT");
  if (!g_active || path == NULL || *path == 0) return;
  FILE* f = fopen(path, "w");
  if (f == NULL) return;
  fprintf(f, "%lld\n", g_written);
  fclose(f);
}

typedef ssize_t (*write_fn)(int, const void*, size_t);
typedef ssize_t (*pwrite_fn)(int, const void*, size_t, off_t);
typedef ssize_t (*writev_fn)(int, const struct iovec*, int);

static void* next(const char* name) { return dlsym(RTLD_NEXT, name); }

ssize_t write(int fd, const void* buf, size_t count) {
  static write_fn real = NULL;
  if (real == NULL) real = (write_fn)next("write");
  if (must_fail(fd, count, -1)) return -1;
  return real(fd, buf, count);
}

ssize_t pwrite(int fd, const void* buf, size_t count, off_t off) {
  static pwrite_fn real = NULL;
  if (real == NULL) real = (pwrite_fn)next("pwrite");
  if (must_fail(fd, count, off)) return -1;
  return real(fd, buf, count, off);
}

ssize_t pwrite64(int fd, const void* buf, size_t count, off_t off) {
  static pwrite_fn real = NULL;
  if (real == NULL) real = (pwrite_fn)next("pwrite64");
  if (must_fail(fd, count, off)) return -1;
  return real(fd, buf, count, off);
}

ssize_t writev(int fd, const struct iovec* iov, int n) {
  static writev_fn real = NULL;
  if (real == NULL) real = (writev_fn)next("writev");
  size_t count = 0;
  for (int i = 0; i < n; ++i) count += iov[i].iov_len;
  if (must_fail(fd, count, -1)) return -1;
  return real(fd, iov, n);
}

typedef int (*fallocate_fn)(int, int, off_t, off_t);

/* With LB_FAILWRITE_SPACE, reserving space past it fails as on a full file system. */
static int must_refuse_space(int fd, off_t offset, off_t len) {
  if (!matches(fd) || g_space < 0 || (long long)offset + (long long)len <= g_space) return 0;
  errno = ENOSPC;
  return 1;
}

int fallocate(int fd, int mode, off_t offset, off_t len) {
  static fallocate_fn real = NULL;
  if (real == NULL) real = (fallocate_fn)next("fallocate");
  if (must_refuse_space(fd, offset, len)) return -1;
  return real(fd, mode, offset, len);
}

int fallocate64(int fd, int mode, off_t offset, off_t len) {
  static fallocate_fn real = NULL;
  if (real == NULL) real = (fallocate_fn)next("fallocate64");
  if (must_refuse_space(fd, offset, len)) return -1;
  return real(fd, mode, offset, len);
}
