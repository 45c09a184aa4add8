/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * Packet parsing shared by the srv6pm programs: find the SRH of an outer IPv6 packet (skipping
 * VLAN tags and hop-by-hop / destination-options headers), validate it, and hash its SID list.
 * Everything is bounds-checked against data_end; anything malformed or truncated is reported as
 * PARSE_NONE / PARSE_SHORT and the caller lets the packet pass untouched and uncounted.
 */
#ifndef SRV6PM_PARSE_H
#define SRV6PM_PARSE_H

#include "srv6pm.h"

#define ETH_P_IPV6_BE 0xdd86       /* htons(0x86dd) on little endian; see the static check below */
#define ETH_P_8021Q_BE 0x0081
#define ETH_P_8021AD_BE 0xa888
#define NH_HOPOPTS 0
#define NH_TCP 6
#define NH_UDP 17
#define NH_IPV4 4
#define NH_IPV6 41
#define NH_ROUTING 43
#define NH_DSTOPTS 60
#define SRH_TYPE 4
#define MAX_VLAN 2
#define MAX_OFF 4096               /* offsets kept in struct srv6_view are re-checked against this:
				    * the verifier needs bounded packet offsets */
#define MAX_EXT 4                  /* HBH and DO may precede the SRH (RFC 8200 order): room to spare */

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the ethertype constants above assume a little-endian target"
#endif

enum parse_rc {
	PARSE_OK = 0,
	PARSE_NONE = 1,            /* not an SRv6 packet we handle: pass, do not count */
	PARSE_SHORT = 2,           /* a header ran past data_end: truncated, or not linear (TC) */
};

struct eth_h { __u8 dst[6]; __u8 src[6]; __u16 proto; } __attribute__((packed));
struct vlan_h { __u16 tci; __u16 proto; } __attribute__((packed));
struct ip6_h { __u8 vtc_flow[4]; __u16 plen; __u8 nexthdr; __u8 hlim; __u8 saddr[16]; __u8 daddr[16]; };
struct ext_h { __u8 nexthdr; __u8 hdrlen; };
struct srh_h { __u8 nexthdr; __u8 hdrlen; __u8 type; __u8 segments_left; __u8 last_entry;
	       __u8 flags; __u16 tag; };

struct srv6_view {
	__u32 l3_off;              /* outer IPv6 header, from the start of the frame */
	__u32 srh_off;             /* SRH, from the start of the frame */
	__u32 srh_end;             /* first byte after the SRH (its TLVs included) */
	__u32 nsids;
	__u8 next;                 /* next header after the SRH */
	__u64 hash;
};


/* Parse data..data_end; fill *v on PARSE_OK. */
static __always_inline int srv6_parse(void *data, void *data_end, struct srv6_view *v)
{
	struct eth_h *eth = data;
	struct ip6_h *ip6;
	struct srh_h *srh;
	void *cur;
	__u16 proto;
	__u8 nh;
	__u32 n;
	__u64 h;

	if ((void *)(eth + 1) > data_end)
		return PARSE_NONE;
	proto = eth->proto;
	cur = eth + 1;
#pragma unroll
	for (int i = 0; i < MAX_VLAN; i++) {
		struct vlan_h *vh = cur;

		if (proto != ETH_P_8021Q_BE && proto != ETH_P_8021AD_BE)
			break;
		if ((void *)(vh + 1) > data_end)
			return PARSE_SHORT;
		proto = vh->proto;
		cur = vh + 1;
	}
	if (proto != ETH_P_IPV6_BE)
		return PARSE_NONE;
	ip6 = cur;
	if ((void *)(ip6 + 1) > data_end)
		return PARSE_SHORT;
	if ((ip6->vtc_flow[0] >> 4) != 6)
		return PARSE_NONE;
	v->l3_off = (void *)ip6 - data;
	nh = ip6->nexthdr;
	cur = ip6 + 1;
#pragma unroll
	for (int i = 0; i < MAX_EXT; i++) {
		struct ext_h *eh = cur;

		if (nh != NH_HOPOPTS && nh != NH_DSTOPTS)
			break;
		if ((void *)(eh + 1) > data_end)
			return PARSE_SHORT;
		nh = eh->nexthdr;
		cur += ((__u32)eh->hdrlen + 1) * 8;
	}
	if (nh != NH_ROUTING)
		return PARSE_NONE;
	srh = cur;
	if ((void *)(srh + 1) > data_end)
		return PARSE_SHORT;
	if (srh->type != SRH_TYPE)
		return PARSE_NONE;
	n = (__u32)srh->last_entry + 1;
	/* 17+ SIDs are never monitored; a SID list longer than the header is malformed */
	if (n > SRV6PM_MAX_SIDS || (__u32)srh->hdrlen < 2 * n)
		return PARSE_NONE;
	v->srh_off = cur - data;
	v->srh_end = v->srh_off + 8 + (__u32)srh->hdrlen * 8;
	if (data + v->srh_end > data_end)
		return PARSE_SHORT;            /* truncated SRH (or TLVs) */
	v->nsids = n;
	v->next = srh->nexthdr;

	h = SRV6PM_HASH_SEED ^ n;
#pragma unroll
	for (int i = 0; i < SRV6PM_MAX_SIDS; i++) {
		__u64 *w = cur + 8 + i * 16;

		if (i >= n)
			break;
		if ((void *)(w + 2) > data_end)
			return PARSE_SHORT;
		h += (w[0] + SRV6PM_HASH_KEYS[2 * i]) * (w[1] + SRV6PM_HASH_KEYS[2 * i + 1]);
	}
	h ^= h >> 33;
	h *= SRV6PM_FMIX_MUL;
	v->hash = h ^ (h >> 33);
	return PARSE_OK;
}

/* Exact comparison of the packet's SID list with a monitored flow's (no false match). */
static __always_inline int srv6_same_sids(void *data, void *data_end, const struct srv6_view *v,
					  const struct srv6pm_flow *f)
{
	__u32 n = v->nsids;
	__u64 diff = 0;
	void *segs;

	if (f->nsids != n || v->srh_off > MAX_OFF)
		return 0;
	segs = data + v->srh_off + 8;
	/* accumulate the differences, one branch at the end: a match is the common case */
#pragma unroll
	for (int i = 0; i < SRV6PM_MAX_SIDS; i++) {
		__u64 *w = segs + i * 16;
		const __u64 *s = (const __u64 *)f->sids[i];

		if (i >= n)
			break;
		if ((void *)(w + 2) > data_end)
			return 0;
		diff |= (w[0] ^ s[0]) | (w[1] ^ s[1]);
	}
	return diff == 0;
}

/*
 * Length, from the outer IPv6 header, of the headers every GSO segment repeats (outer IPv6,
 * SRH, inner IP, inner TCP/UDP). 0 when the inner headers cannot be read.
 */
static __always_inline __u32 srv6_gso_hdr_len(void *data, void *data_end, const struct srv6_view *v)
{
	__u8 *inner, *l4h;
	__u8 l4;

	if (v->srh_end > MAX_OFF)
		return 0;
	inner = data + v->srh_end;
	if (v->next == NH_IPV6) {
		if ((void *)(inner + 40) > data_end)
			return 0;
		l4 = inner[6];
		l4h = inner + 40;
	} else if (v->next == NH_IPV4) {
		if ((void *)(inner + 20) > data_end)
			return 0;
		l4 = inner[9];
		l4h = inner + (inner[0] & 0x0f) * 4;
	} else {
		return 0;
	}
	if (l4 == NH_UDP)
		return (void *)(l4h + 8) - data - v->l3_off;
	if (l4 == NH_TCP) {
		if ((void *)(l4h + 13) > data_end)
			return 0;
		return (void *)(l4h + (l4h[12] >> 4) * 4) - data - v->l3_off;
	}
	return 0;
}

#endif /* SRV6PM_PARSE_H */
