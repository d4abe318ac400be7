// Waiting on memory that another process on this host writes (the shared-memory transport's barrier
// and its point-to-point rings): spin briefly, since a peer on one host usually answers within
// microseconds, then yield (the peer may need this very CPU), then sleep on a futex word the writer
// bumps, calling `watch` every few milliseconds so a dead peer, an abort or a deadline still ends the
// wait. The futex is shared (not FUTEX_PRIVATE): the word lives in memory mapped by several processes.
#pragma once

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <ctime>
#include <functional>

namespace cohort::detail {

/// Called every few milliseconds while a rank waits for its peers; throws to give up (a peer died, an
/// abort notice arrived, the deadline passed).
using ShmWatch = std::function<void()>;

/// A futex word and how many waiters sleep on it, so a writer skips the wake syscall when none does.
struct ShmWakeup {
  std::atomic<uint32_t> word{0};
  std::atomic<uint32_t> sleepers{0};

  /// The writer's side, after publishing what the waiters look for.
  void notify() {
    word.fetch_add(1);
    if (sleepers.load() > 0)
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  }
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "futex words must be plain 32-bit atomics");

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

/// Returns once `ready()` holds. Spinning stays short: on a node whose cores all train, it steals compute.
/// `peer_shares_cpu()`, asked now and then while spinning: true when a peer this wait needs last ran on
/// this very CPU (unbound ranks that the scheduler put together): pausing cannot help then, since the
/// peer only runs once this rank gives the CPU up, so the wait yields at once.
template <typename Ready, typename SharesCpu>
void shm_wait(Ready ready, ShmWakeup& wakeup, const ShmWatch& watch, SharesCpu peer_shares_cpu) {
  using Clock = std::chrono::steady_clock;
  // Pause instructions only for the first 10 us (a peer on another core answers within a few: a
  // small message's round trip), then yields until 50 us: the peer may need this very CPU. Yielding
  // from the start cost a ping-pong 0.5-1 us per message (a syscall between two looks).
  constexpr auto kPureSpinFor = std::chrono::microseconds(10);
  constexpr auto kSpinFor = std::chrono::microseconds(50);
  constexpr auto kWatchEvery = std::chrono::milliseconds(10);
  const auto start = Clock::now();
  bool yielding = peer_shares_cpu();
  for (int i = 1;; ++i) {
    if (ready()) return;
    if (yielding) sched_yield();
    else cpu_relax();
    if (i % 32 == 0) {
      const auto spent = Clock::now() - start;
      if (spent > kSpinFor) break;
      yielding = spent > kPureSpinFor || peer_shares_cpu();
    }
  }
  auto next_watch = Clock::now() + kWatchEvery;
  const timespec timeout{0, long(std::chrono::nanoseconds(kWatchEvery).count())};
  for (;;) {
    // Registered as a sleeper before reading the word: a write after this read changes the word, so
    // the futex wait returns at once instead of missing the wake.
    wakeup.sleepers.fetch_add(1);
    const uint32_t word = wakeup.word.load();
    if (ready()) {
      wakeup.sleepers.fetch_sub(1);
      return;
    }
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&wakeup.word), FUTEX_WAIT, word, &timeout, nullptr, 0);
    wakeup.sleepers.fetch_sub(1);
    if (Clock::now() >= next_watch) {
      watch();
      next_watch = Clock::now() + kWatchEvery;
    }
  }
}

/// For waits on a single writer whose CPU is not published (the point-to-point rings).
template <typename Ready>
void shm_wait(Ready ready, ShmWakeup& wakeup, const ShmWatch& watch) {
  shm_wait(ready, wakeup, watch, [] { return false; });
}

}  // namespace cohort::detail
