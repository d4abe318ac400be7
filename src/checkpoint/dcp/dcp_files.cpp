#include "checkpoint/dcp/dcp_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "checkpoint/dcp/torch_save_item.h"
#include "cohort/error.h"
#include "core/check.h"
#include "core/file_read.h"

namespace cohort::detail::dcp {

DcpFiles::~DcpFiles() {
  for (const auto& [name, file] : open_) ::close(file.first);
}

int DcpFiles::descriptor(const std::string& file) {
  auto it = open_.find(file);
  if (it != open_.end()) return it->second.first;
  const int fd = open_regular_file(dir_ + "/" + file, "DCP data file " + dir_ + "/" + file);
  struct stat info {};
  ::fstat(fd, &info);
  return open_.emplace(file, std::make_pair(fd, int64_t(info.st_size))).first->second.first;
}

std::string DcpFiles::item(const DcpChunk& chunk, const std::string& fqn) {
  const int fd = descriptor(chunk.file);
  const int64_t size = open_.at(chunk.file).second;
  COHORT_CHECK_KIND(kIO, chunk.offset <= size && chunk.length <= size - chunk.offset, dir_, "/", chunk.file,
                    ": the item of '", fqn, "' (bytes ", chunk.offset, "+", chunk.length, ") is past its end (", size,
                    " bytes)");
  std::string bytes(static_cast<size_t>(chunk.length), '\0');
  for (int64_t done = 0; done < chunk.length;) {
    const ssize_t got = ::pread(fd, bytes.data() + done, static_cast<size_t>(chunk.length - done), chunk.offset + done);
    if (got < 0 && errno == EINTR) continue;
    COHORT_CHECK_KIND(kIO, got > 0, dir_, "/", chunk.file, ": cannot read the item of '", fqn,
                      "': ", got < 0 ? std::strerror(errno) : "the file ended");
    done += got;
  }
  return bytes;
}

torch::Tensor DcpFiles::tensor(const DcpEntry& entry, c10::ScalarType dtype) {
  torch::Tensor whole = torch::empty(entry.size, torch::TensorOptions().dtype(dtype));
  int64_t covered = 0;
  for (const DcpChunk& chunk : entry.chunks) {
    int64_t numel = 1;
    for (int64_t s : chunk.sizes) numel *= s;
    if (numel == 0) continue;  // an empty shard holds nothing (several may share one key)
    const std::string bytes = item(chunk, entry.fqn);
    const std::string what = dir_ + "/" + chunk.file + " item of '" + entry.fqn + "'";
    torch::Tensor part = read_tensor_item(bytes.data(), bytes.size(), what);
    COHORT_CHECK_KIND(kIO, part.sizes().vec() == chunk.sizes, what, " holds a tensor of shape ", part.sizes(),
                      ", the metadata's chunk ", c10::IntArrayRef(chunk.sizes));
    torch::Tensor place = whole;
    for (size_t d = 0; d < chunk.sizes.size(); ++d) place = place.narrow(int64_t(d), chunk.offsets[d], chunk.sizes[d]);
    place.copy_(part);
    covered += numel;
  }
  // metadata.cpp refused overlapping chunks: the ones that cover every element tile the tensor.
  COHORT_CHECK_KIND(kIO, covered == whole.numel(), dir_, "/.metadata: the chunks of '", entry.fqn, "' cover ", covered,
                    " of its ", whole.numel(), " elements");
  return whole;
}

PickleValue DcpFiles::object(const DcpEntry& entry) {
  COHORT_CHECK_KIND(kIO, entry.chunks.size() == 1, dir_, "/.metadata: object '", entry.fqn, "' has ",
                    entry.chunks.size(), " items, not one");
  const std::string bytes = item(entry.chunks[0], entry.fqn);
  return read_object_item(bytes.data(), bytes.size(),
                          dir_ + "/" + entry.chunks[0].file + " item of '" + entry.fqn + "'");
}

}  // namespace cohort::detail::dcp
