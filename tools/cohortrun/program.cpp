// Program lookup for cohortrun (see program.h): checks existence, file type and the execute bit
// with access(X_OK) before any node joins a rendezvous or any worker starts.
#include "cohortrun/program.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "cohortrun/options.h"

namespace cohort::detail::launch {
namespace {

// 0 when `path` is an executable regular file, else the errno that says why not.
int check_executable(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return errno;
  if (S_ISDIR(info.st_mode)) return EISDIR;
  if (!S_ISREG(info.st_mode)) return EACCES;
  if (::access(path.c_str(), X_OK) != 0) return errno;
  return 0;
}

}  // namespace

std::string getenv_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

std::string resolve_program(const std::string& program, const std::string& path_env) {
  if (program.empty()) throw UsageError("the program name is empty");
  if (program.find('/') != std::string::npos) {
    const int error = check_executable(program);
    if (error == ENOENT) throw UsageError("program " + program + " does not exist");
    if (error == EISDIR) throw UsageError("program " + program + " is a directory");
    if (error != 0) {
      throw UsageError("program " + program + " is not executable (" + std::strerror(error) + ")");
    }
    return program;
  }
  std::istringstream dirs(path_env.empty() ? "/usr/local/bin:/usr/bin:/bin" : path_env);
  std::string dir;
  int first_error = 0;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    const int error = check_executable(candidate);
    if (error == 0) return candidate;
    if (error != ENOENT && error != ENOTDIR && first_error == 0) first_error = error;
  }
  if (first_error != 0) {
    throw UsageError("program " + program + " found in PATH is not executable (" + std::strerror(first_error) + ")");
  }
  throw UsageError("program " + program + " not found in PATH (to run a file here, write ./" + program + ")");
}

}  // namespace cohort::detail::launch
