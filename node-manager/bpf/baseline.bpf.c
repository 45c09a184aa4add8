// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * Empty programs: the baseline bench/ subtracts from the srv6pm programs' per-packet cost.
 * baseline_tc_drop: a filter that drops everything, which tests put after ours to prove that the
 * TC chain continues past srv6pm (this kernel has no other classifier modules).
 * baseline_xdp_drop: the cheapest sink, for bench/counters_pdr.py.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

SEC("xdp")
int baseline_xdp(struct xdp_md *ctx)
{
	return XDP_PASS;
}

SEC("xdp")
int baseline_xdp_drop(struct xdp_md *ctx)
{
	return XDP_DROP;
}

SEC("tc")
int baseline_tc(struct __sk_buff *skb)
{
	return -1; /* TC_ACT_UNSPEC */
}

SEC("tc")
int baseline_tc_drop(struct __sk_buff *skb)
{
	return 2; /* TC_ACT_SHOT */
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
