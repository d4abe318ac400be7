# The links between bench/hosts' hosts (sourced by run.sh, after tests/cluster/lib.sh): a tbf rate
# limit on each host's eth0 (its way out to the bridge, so every byte from one host to another passes
# exactly one shaper, as on a full-duplex link of that rate), its removal, and the shapers' counters
# as proof that traffic went through them. This kernel has tbf but not netem: a rate, no added delay.

LINK_BURST=${LINK_BURST:-256kb}   # tbf bucket: above veth's 64 KiB GSO packets, 2 ms at 1 Gbit/s
LINK_LATENCY=50ms                 # the queue tbf keeps before dropping: rate x 50 ms + burst

# Shapes every compute host's eth0 to RATE (tc's units: 1gbit, 100mbit); "none" removes the shapers.
links_rate() {
  local rate=$1 host
  for host in "${BENCH_HOSTS[@]}"; do
    tc -n "$CL_PREFIX$host" qdisc del dev eth0 root 2>/dev/null
    [ "$rate" = none ] && continue
    tc -n "$CL_PREFIX$host" qdisc add dev eth0 root tbf rate "$rate" burst "$LINK_BURST" latency "$LINK_LATENCY" ||
      { cl_log "tc could not add tbf rate $rate on $host's eth0"; return 1; }
  done
}

# Makes NAME (tcp_congestion_control: reno, cubic, bbr) every host's TCP congestion control, for all the
# programs alike; "system" leaves the machine's. A namespace other than the machine's own may only
# take a name of net.ipv4.tcp_allowed_congestion_control (the machine's list, which root can extend).
links_congestion() {
  local name=$1 host available allowed
  [ "$name" = system ] && return 0
  available=$(sysctl -n net.ipv4.tcp_available_congestion_control)
  allowed=$(sysctl -n net.ipv4.tcp_allowed_congestion_control)
  for host in "${BENCH_HOSTS[@]}"; do
    on_host "$host" sysctl -qw net.ipv4.tcp_congestion_control="$name" 2>/dev/null || {
      cl_log "CONGESTION=$name: $host refuses it (available: $available; a namespace may take: $allowed)"
      return 1
    }
  done
}

# One line per host: what its eth0's qdisc sent, dropped and held back (tbf's overlimits).
links_stats() {
  local host
  for host in "${BENCH_HOSTS[@]}"; do
    tc -n "$CL_PREFIX$host" -s qdisc show dev eth0 | awk -v h="$host" '
      /^qdisc/ { q = $2; rate = ""; for (i = 1; i < NF; i++) if ($i == "rate") rate = " rate " $(i + 1) }
      /Sent/ { printf "%s eth0: qdisc %s%s, sent %.1f MB, dropped %s, overlimits %s\n", h, q, rate, $2 / 1e6,
               $7 + 0, $9 + 0; exit }'
  done
}
