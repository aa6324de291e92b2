/* nodelist.h - Slurm host lists ("node[01-03,7],gpu-a[1-2]") and task-count lists ("2(x2),1"). */
#ifndef CDDP_COMMON_NODELIST_H
#define CDDP_COMMON_NODELIST_H

#include <stddef.h>

#include "cddp/cddp.h"

/* Most hosts one list may expand to; a longer list is rejected as malformed. */
#define CDDP_NODELIST_MAX 65536

/* Expands list into *hosts (malloc'd array of *n malloc'd names; free with
 * cddp__nodelist_free). Several bracket groups per name, ranges and single numbers
 * inside brackets, zero padding kept ("[01-03,7]" pads every number of the group to
 * 2 digits). INVALID_ARG naming the list and the 1-based position when malformed. */
cddp_result_t cddp__nodelist_expand(const char *list, char ***hosts, int *n);
void cddp__nodelist_free(char **hosts, int n);

/* The first host of list, without expanding the rest. */
cddp_result_t cddp__nodelist_first(const char *list, char *buf, size_t size);

/* Where a Slurm step's store may be, in the order to try: first (the endpoint the step gave),
 * then every other host of list in the list's order (the order of SLURM_NODEID, which is the
 * order of the job's members, so the next in line to take the store over comes next). first
 * is not repeated; it need not be in list. *hosts as for cddp__nodelist_expand. */
cddp_result_t cddp__nodelist_candidates(const char *list, const char *first, char ***hosts, int *n);

/* Slurm's tasks-per-node form "2(x2),1": the count of node index (0-based).
 * INVALID_ARG when malformed or index out of range. */
cddp_result_t cddp__tasks_per_node(const char *spec, int index, int *ntasks);

/* A port for a Slurm step's rendezvous derived from job and step id, in [20000, 32767]
 * (below Linux's ephemeral range) so two jobs sharing a host rarely collide. */
int cddp__slurm_port(long job_id, long step_id);

#endif /* CDDP_COMMON_NODELIST_H */
