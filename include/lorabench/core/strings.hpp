// Small string helpers used across layers.
#pragma once

#include <string>
#include <vector>

namespace lorabench {

// printf-style formatting into a std::string.
std::string strformat(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

std::string trim(const std::string& s);
// Splits on `sep`, trimming each piece; empty input gives an empty vector.
std::vector<std::string> split(const std::string& s, char sep);
std::string join(const std::vector<std::string>& parts, const std::string& sep);
bool starts_with(const std::string& s, const std::string& prefix);
bool ends_with(const std::string& s, const std::string& suffix);

// Ranks as ranges: {0} -> "0", {0,1,2,3} -> "0-3", {0,2,5,6,7} -> "0,2,5-7" (input sorted).
std::string format_rank_list(const std::vector<int>& ranks);

// Human-readable byte counts: "1.50 GiB".
std::string format_bytes(double bytes);

// Reads a whole file; throws IoError naming the path when it cannot.
std::string read_file(const std::string& path);

}  // namespace lorabench
