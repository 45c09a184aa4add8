/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * srv6pm counters: the structures shared between the BPF programs and the Python driver
 * (srv6pm_node/counters/layout.py mirrors them byte for byte; change both or neither).
 *
 * Map layout (one set per direction, egr / ing, pinned under <pin-root>/netns-<cookie>/):
 *
 *   srv6pm_idx_egr   ARRAY         slot  -> struct srv6pm_slot   SRV6PM_TABLE_SIZE slots
 *   srv6pm_flow_egr  ARRAY         flow  -> struct srv6pm_flow   SRV6PM_MAX_FLOWS SID lists
 *   srv6pm_ctr_egr   PERCPU_ARRAY  flow  -> struct srv6pm_ctr
 *   srv6pm_cfg       ARRAY         0     -> struct srv6pm_cfg    (shared by both directions)
 *
 * The index is an open-addressing hash table the driver manages in an ARRAY map: a SID list's
 * entry sits at its home slot (hash & (SRV6PM_TABLE_SIZE - 1)) or one of the next
 * SRV6PM_MAX_PROBE - 1 (linear probing; deleted entries are tombstones until the chain behind them
 * is empty). Array lookups are inlined by the verifier (~2 ns) where a BPF hash map lookup costs
 * ~28 ns here even for an 8-byte key, and 16-byte slots keep probing within a cache line or two.
 * A slot holds the 64-bit hash, compared first; the full SID list of the flow is then compared,
 * so a hash collision never produces a false match (the driver refuses to monitor two lists with
 * the same 64-bit hash, so there is at most one candidate). Counters are per-CPU, by flow id.
 *
 * Updates are race-free without locks: a new slot is written as a tombstone first and then
 * flipped to USED by a write that changes only its state word (and back to a tombstone on
 * removal); the flow's SID list and zeroed counters are in place before that.
 */
#ifndef SRV6PM_H
#define SRV6PM_H

#define SRV6PM_MAX_SIDS 16
#define SRV6PM_MAX_FLOWS 16384                 /* monitored SID lists per direction */
#define SRV6PM_TABLE_SIZE 65536                /* index slots: power of two, load <= 1/4 */
#define SRV6PM_MAX_PROBE 32                    /* slots probed from a list's home slot */
#define SRV6PM_COLOURS 2

enum srv6pm_state {
	SRV6PM_EMPTY = 0,                      /* never used since the chain was clean: stop */
	SRV6PM_USED = 1,
	SRV6PM_DELETED = 2,                    /* tombstone: skip, keep probing */
};

/*
 * The SID-list hash (srv6pm_node/counters/layout.py: sidlist_hash), NH-style (UMAC): with the
 * SRH's 64-bit words w[0..2n-1] (little-endian loads),
 *     h = SEED ^ n + sum_i (w[2i] + K[2i]) * (w[2i+1] + K[2i+1])   (mod 2^64)
 * then the murmur3 finalizer. The products are independent, so the CPU computes them in parallel
 * (a serial multiply chain costs ~2.5 ns per SID here; this ~0.5 ns). It only picks the index
 * slot: the full SID list is compared before anything is counted.
 */
#define SRV6PM_HASH_SEED 0x9e3779b97f4a7c15ULL
#define SRV6PM_FMIX_MUL 0xff51afd7ed558ccdULL
static const __u64 SRV6PM_HASH_KEYS[2 * SRV6PM_MAX_SIDS] = {
	0x9ae16a3b2f90404fULL, 0xc3a5c85c97cb3127ULL, 0xb492b66fbe98f273ULL, 0x9ae16a3b2f90404bULL,
	0xc949d7c7509e6557ULL, 0xff51afd7ed558ccdULL, 0xc4ceb9fe1a85ec53ULL, 0x87c37b91114253d5ULL,
	0x4cf5ad432745937fULL, 0x52dce729da3ed9c3ULL, 0x38495ab5b5e2cb6bULL, 0x7a3f5bb5c4d5e6f7ULL,
	0xa0761d6478bd642fULL, 0xe7037ed1a0b428dbULL, 0x8ebc6af09c88c6e3ULL, 0x589965cc75374cc3ULL,
	0x1d8e4e27c47d124fULL, 0x9e3779b97f4a7c15ULL, 0xbf58476d1ce4e5b9ULL, 0x94d049bb133111ebULL,
	0x2127599bf4325c37ULL, 0x880355f21e6d1965ULL, 0xd6e8feb86659fd93ULL, 0xa5cb9243f2c8e8b1ULL,
	0x165667b19e3779f9ULL, 0x27d4eb2f165667c5ULL, 0x85ebca6bc2b2ae35ULL, 0xcc9e2d51b873f2d5ULL,
	0x1b873593e6546b64ULL, 0xe6546b64cc9e2d51ULL, 0x61c8864680b583ebULL, 0x7feb352d846ca6b3ULL
};

struct srv6pm_slot {
	__u64 hash;                              /* SID-list hash (parse.h: srv6pm_mix) */
	__u32 state;                             /* enum srv6pm_state */
	__u32 flow;                              /* flow id: index of the SID list and counters */
};

struct srv6pm_flow {
	__u32 nsids;                             /* 1..SRV6PM_MAX_SIDS */
	__u32 pad;
	__u8 sids[SRV6PM_MAX_SIDS][16];          /* SRH order: sids[0] is the last segment */
};

struct srv6pm_ctr {
	__u64 packets[SRV6PM_COLOURS];
	__u64 bytes[SRV6PM_COLOURS];             /* IPv6 bytes: outer header onwards, no L2 */
};

struct srv6pm_cfg {
	__u32 colour;                            /* active colour (0 or 1) written by the marker */
	__u32 tc_mask;                           /* the one traffic-class bit used: 0x04..0x80 */
};

#endif /* SRV6PM_H */
