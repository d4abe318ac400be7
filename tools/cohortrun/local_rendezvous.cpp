// The single-node rendezvous (see local_rendezvous.h).
#include "cohortrun/local_rendezvous.h"

#include "core/job_secret.h"
#include "core/socket.h"
#include "world/worker_env.h"

namespace cohort::detail::launch {

std::string workers_secret() {
  const std::string given = given_job_secret(process_env());
  return given.empty() ? new_job_secret() : given;
}

RoundInfo LocalRendezvous::join(int round, int failure_restarts) {
  RoundInfo info;
  info.round = round;
  info.failure_restarts = failure_restarts;
  info.world_size = options_.nproc;
  if (options_.rdzv_backend == "static") {  // torchrun: workers use MASTER_ADDR:MASTER_PORT
    info.master_addr = options_.master_addr;
    info.master_port = options_.master_port;
  } else {  // c10d or --standalone: a free port, fresh each round
    info.master_addr = "127.0.0.1";
    info.master_port = net::pick_free_port();
  }
  info.run_id = options_.run_id;
  info.secret = secret_;
  info.launch_id = launch_id_;
  return info;
}

}  // namespace cohort::detail::launch
