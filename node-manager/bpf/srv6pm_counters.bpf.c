// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * srv6pm counters: alternate marking (RFC 9341) and per (SID list, colour) counting of SRv6
 * traffic.
 *
 *   srv6pm_tc_egr   TC clsact egress of the ingress edge router: for a monitored SID list, set the
 *                   active colour in one DSCP bit of the outer traffic class, count it.
 *   srv6pm_xdp_ing  XDP of the egress edge router: count per (SID list, colour read from packet).
 *   srv6pm_tc_ing   the same as a TC clsact ingress program, where XDP cannot attach.
 *
 * Every program only ever passes packets (TC: TC_ACT_UNSPEC, so the filter chain continues;
 * XDP: XDP_PASS). Only the chosen traffic-class bit of a monitored packet is ever written.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "srv6pm.h"
#include "parse.h"

#define TC_ACT_UNSPEC (-1)

/* Load skb->data / skb->data_end with one ctx access each: clang may otherwise keep
 * "ctx + offset" in a register across calls, which the verifier rejects. */
#define SKB_PTR(skb, field)                                                          \
	({                                                                           \
		void *__p;                                                           \
		asm volatile("%0 = *(u32 *)(%1 + %2)"                                \
			     : "=r"(__p)                                             \
			     : "r"(skb), "i"(__builtin_offsetof(struct __sk_buff, field))); \
		__p;                                                                 \
	})

#define INDEX_MAP(name)                                                              \
	struct {                                                                     \
		__uint(type, BPF_MAP_TYPE_ARRAY);                                    \
		__uint(max_entries, SRV6PM_TABLE_SIZE);                              \
		__type(key, __u32);                                                  \
		__type(value, struct srv6pm_slot);                                   \
	} name SEC(".maps")
#define FLOW_MAP(name)                                                               \
	struct {                                                                     \
		__uint(type, BPF_MAP_TYPE_ARRAY);                                    \
		__uint(max_entries, SRV6PM_MAX_FLOWS);                               \
		__type(key, __u32);                                                  \
		__type(value, struct srv6pm_flow);                                   \
	} name SEC(".maps")
#define CTR_MAP(name)                                                                \
	struct {                                                                     \
		__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);                             \
		__uint(max_entries, SRV6PM_MAX_FLOWS);                               \
		__type(key, __u32);                                                  \
		__type(value, struct srv6pm_ctr);                                    \
	} name SEC(".maps")

INDEX_MAP(srv6pm_idx_egr);
INDEX_MAP(srv6pm_idx_ing);
FLOW_MAP(srv6pm_flow_egr);
FLOW_MAP(srv6pm_flow_ing);
CTR_MAP(srv6pm_ctr_egr);
CTR_MAP(srv6pm_ctr_ing);

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct srv6pm_cfg);
} srv6pm_cfg SEC(".maps");

/* DSCP bit 0 (traffic-class bit 2) until the driver writes srv6pm_cfg: unused by every
 * standard code point (CS, AF and EF are all even). */
#define DEFAULT_TC_MASK 0x04

static __always_inline __u32 cfg_tc_mask(const struct srv6pm_cfg *cfg)
{
	__u32 m = cfg ? cfg->tc_mask : 0;

	/* only DSCP bits (traffic-class bits 2..7); never ECN, never more than one bit */
	if (m < 0x04 || m > 0x80 || (m & (m - 1)))
		m = DEFAULT_TC_MASK;
	return m;
}

/* The flow id of the packet's SID list, or -1 if it is not monitored. */
static __always_inline int flow_lookup(void *index, void *flows, void *data, void *data_end,
				       const struct srv6_view *v)
{
	__u32 home = (__u32)v->hash, id = SRV6PM_MAX_FLOWS;
	struct srv6pm_flow *f;

#pragma unroll
	for (int i = 0; i < SRV6PM_MAX_PROBE; i++) {
		__u32 k = (home + i) & (SRV6PM_TABLE_SIZE - 1);
		struct srv6pm_slot *s = bpf_map_lookup_elem(index, &k);

		if (!s || s->state == SRV6PM_EMPTY)
			return -1;
		if (s->state == SRV6PM_USED && s->hash == v->hash) {
			id = s->flow;   /* the only candidate: no two monitored lists share a hash */
			break;
		}
	}
	f = bpf_map_lookup_elem(flows, &id);
	if (!f || !srv6_same_sids(data, data_end, v, f))
		return -1;
	return id;
}

static __always_inline __u32 tc_of(const struct ip6_h *ip6)
{
	return ((ip6->vtc_flow[0] & 0x0f) << 4) | (ip6->vtc_flow[1] >> 4);
}

static __always_inline void count(void *ctrs, __u32 slot, __u32 colour, __u64 pkts, __u64 bytes)
{
	struct srv6pm_ctr *c = bpf_map_lookup_elem(ctrs, &slot);

	if (!c)
		return;
	colour &= 1;
	c->packets[colour] += pkts;
	c->bytes[colour] += bytes;
}

/* Packets and IPv6 bytes an skb stands for: a GSO skb counts as the segments it becomes. */
static __always_inline void skb_amount(struct __sk_buff *skb, void *data, void *data_end,
				       const struct srv6_view *v, __u64 *pkts, __u64 *bytes)
{
	__u32 len = skb->len - v->l3_off;
	__u32 gso_size = skb->gso_size;
	__u32 segs, hdr;

	*pkts = 1;
	*bytes = len;
	if (!gso_size)
		return;
	hdr = srv6_gso_hdr_len(data, data_end, v);
	if (!hdr || hdr >= len)
		hdr = v->srh_end - v->l3_off;  /* inner headers unreadable: repeat the outer ones */
	segs = skb->gso_segs;
	if (!segs)
		segs = (len - hdr + gso_size - 1) / gso_size;
	if (segs < 1)
		segs = 1;
	*pkts = segs;
	*bytes = len + (__u64)(segs - 1) * hdr;
}

/* Parse an skb; when a header lies beyond the linear part, pull it in once and parse again. */
static __always_inline int skb_parse(struct __sk_buff *skb, struct srv6_view *v)
{
	void *data = SKB_PTR(skb, data);
	void *data_end = SKB_PTR(skb, data_end);
	int rc = srv6_parse(data, data_end, v);
	__u32 want;

	if (rc != PARSE_SHORT || skb->len <= (__u32)(data_end - data))
		return rc;
	want = skb->len < 1024 ? skb->len : 1024;
	if (bpf_skb_pull_data(skb, want))
		return PARSE_NONE;
	data = SKB_PTR(skb, data);
	data_end = SKB_PTR(skb, data_end);
	return srv6_parse(data, data_end, v);
}

SEC("tc")
int srv6pm_tc_egr(struct __sk_buff *skb)
{
	struct srv6_view v;
	struct srv6pm_cfg *cfg;
	struct ip6_h *ip6;
	void *data, *data_end;
	__u32 zero = 0, mask, colour, tc, ntc;
	__u64 pkts, bytes;
	int idx;

	if (skb_parse(skb, &v) != PARSE_OK)
		return TC_ACT_UNSPEC;
	data = SKB_PTR(skb, data);
	data_end = SKB_PTR(skb, data_end);
	idx = flow_lookup(&srv6pm_idx_egr, &srv6pm_flow_egr, data, data_end, &v);
	if (idx < 0)
		return TC_ACT_UNSPEC;
	if (v.l3_off > MAX_OFF)
		return TC_ACT_UNSPEC;
	ip6 = data + v.l3_off;
	if ((void *)(ip6 + 1) > data_end)
		return TC_ACT_UNSPEC;
	cfg = bpf_map_lookup_elem(&srv6pm_cfg, &zero);
	mask = cfg_tc_mask(cfg);
	colour = cfg ? cfg->colour & 1 : 0;
	skb_amount(skb, data, data_end, &v, &pkts, &bytes);
	count(&srv6pm_ctr_egr, idx, colour, pkts, bytes);

	tc = tc_of(ip6);
	ntc = colour ? (tc | mask) : (tc & ~mask);
	if (ntc != tc) {
		/* rewrite only the two bytes holding the traffic class; the flow label's top nibble
		 * and the version are carried over unchanged. bpf_skb_store_bytes unclones the skb
		 * only when it actually writes. */
		__u8 b[2];

		b[0] = (ip6->vtc_flow[0] & 0xf0) | (ntc >> 4);
		b[1] = ((ntc & 0x0f) << 4) | (ip6->vtc_flow[1] & 0x0f);
		bpf_skb_store_bytes(skb, v.l3_off, b, 2, 0);
	}
	return TC_ACT_UNSPEC;
}

static __always_inline void count_ingress(void *data, void *data_end, const struct srv6_view *v,
					  __u64 pkts, __u64 bytes)
{
	struct srv6pm_cfg *cfg;
	struct ip6_h *ip6;
	__u32 zero = 0;
	int idx;

	if (v->l3_off > MAX_OFF)
		return;
	ip6 = data + v->l3_off;
	idx = flow_lookup(&srv6pm_idx_ing, &srv6pm_flow_ing, data, data_end, v);
	if (idx < 0)
		return;
	if ((void *)(ip6 + 1) > data_end)
		return;
	cfg = bpf_map_lookup_elem(&srv6pm_cfg, &zero);
	count(&srv6pm_ctr_ing, idx, (tc_of(ip6) & cfg_tc_mask(cfg)) ? 1 : 0, pkts, bytes);
}

SEC("xdp")
int srv6pm_xdp_ing(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct srv6_view v;

	if (srv6_parse(data, data_end, &v) != PARSE_OK)
		return XDP_PASS;
	count_ingress(data, data_end, &v, 1, (data_end - data) - v.l3_off);
	return XDP_PASS;
}

SEC("tc")
int srv6pm_tc_ing(struct __sk_buff *skb)
{
	struct srv6_view v;
	void *data, *data_end;
	__u64 pkts, bytes;

	if (skb_parse(skb, &v) != PARSE_OK)
		return TC_ACT_UNSPEC;
	data = SKB_PTR(skb, data);
	data_end = SKB_PTR(skb, data_end);
	/* a GRO-merged skb counts as the packets that arrived on the wire */
	skb_amount(skb, data, data_end, &v, &pkts, &bytes);
	count_ingress(data, data_end, &v, pkts, bytes);
	return TC_ACT_UNSPEC;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
