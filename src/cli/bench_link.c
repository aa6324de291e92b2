/* bench_link.c - keeps both transports in the cddp binary: comm.c names them with #pragma weak, and
 * a static link does not pull an archive member that only weak references need. Delete this file
 * once comm.c refers to them strongly. */
#include "comm/transport.h"

const cddp__transport_t *const cddp__cli_transports[] = {&cddp__transport_shm, &cddp__transport_tcp};
