// Reading a user's small file (a ds_config, a data file's header) without trusting what is at the path:
// a fifo would block the open forever and a device such as /dev/zero would be read until memory runs
// out, so the file is opened without blocking, checked to be a regular file, and read no further than
// the size it had then. Links are followed (a user's file may be one); cohort's own files go through
// core/safe_file.h's open_own_file, which refuses links.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace cohort::detail {

/// "a fifo", "a character device", "a directory", ... for a file type that is not a regular file;
/// nullptr for a regular file.
const char* odd_file_type(mode_t mode);

/// Opens `path` for reading (links followed) and returns a blocking descriptor the caller closes.
/// Throws cohort::Error (ErrorKind::kIO), every message starting with `source` (e.g. "ds_config
/// x.json"): "<source>: cannot open: <errno text>", "<source>: it is a fifo, not a regular file".
int open_regular_file(const std::string& path, const std::string& source);

/// The whole of `path` (open_regular_file), at most `max_bytes`: a larger file is refused naming its
/// size ("<source>: it has N bytes, more than the M accepted"), a read error as "<source>: cannot read: ...".
std::string read_regular_file(const std::string& path, const std::string& source, int64_t max_bytes);

}  // namespace cohort::detail
