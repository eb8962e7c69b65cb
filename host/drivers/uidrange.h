/*
 * uidrange: which host uids a container computer's guest uids map to.
 *
 * Guest uids and gids 0..65535 map to host ids base..base+65535, one range
 * per computer for its whole life (its upper/ directory stores files under
 * those host ids, so the range must not change between stop and start, and
 * no two computers may share one). Ranges start at 524288 (0x80000), the
 * start of the range systemd's UIDS-GIDS.md reserves for containers, and
 * end before 0x6FFF0000: 28664 computers per host.
 *
 * Claims are symlinks in a registry directory, range number → the
 * computer's directory: /var/lib/cubicle/uid-slots, or $CUBICLE_UID_SLOTS.
 * A claim whose computer directory has lost its upper/ is stale and reused.
 * The registry is locked with flock, so threads and processes can claim
 * concurrently.
 */
#ifndef CUBICLE_UIDRANGE_H
#define CUBICLE_UIDRANGE_H

#include "err.h"

#define UIDRANGE_FIRST 0x80000U
#define UIDRANGE_END   0x6FFF0000U
#define UIDRANGE_SIZE  0x10000U
#define UIDRANGE_COUNT ((UIDRANGE_END - UIDRANGE_FIRST) / UIDRANGE_SIZE)

/* The first host id of range `slot`. */
unsigned uidrange_base(long long slot);

/*
 * Claims a range for the computer whose directory is `owner`: `want` (>= 0)
 * when it already had one (claimed again, in case the registry was wiped),
 * else the first free one. Returns the range's number, or -1 with e filled
 * (ERR_LIMIT when all are in use).
 */
long long uidrange_claim(const char *owner, long long want, struct err *e);

/* Gives the range back if `owner` holds it. */
void uidrange_release(const char *owner, long long slot);

/*
 * Moves every file under path (not crossing mounts, not following links)
 * that is owned by another computer's range into range `base`, keeping the
 * id within the range: a session directory used by an earlier computer.
 */
void uidrange_adopt_tree(const char *path, unsigned base);

/* "user" in every image: the guest uid and gid that own /session. */
#define UIDRANGE_GUEST_USER 1000U

/*
 * Readies a session directory for a computer of range `base`: creates it,
 * moves what an earlier computer left into this range (uidrange_adopt_tree)
 * and makes input/ output/ working/ owned by the range's guest user. A
 * session outlives computers, and the next one may have another range (or
 * be of the other driver: both store the user's files under base + 1000).
 */
int uidrange_session_prepare(const char *dir, unsigned base, struct err *e);

#endif
