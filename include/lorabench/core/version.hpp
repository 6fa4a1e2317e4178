#pragma once

namespace lorabench {
// The program version (CMake project version) and the git commit it was built from ("-dirty" when the
// work tree had uncommitted changes, "unknown" outside a git checkout).
const char* program_version();
const char* git_commit();
}  // namespace lorabench
