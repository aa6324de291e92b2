/* gpus.h - how many GPUs this process may use: CUDA_VISIBLE_DEVICES, else the driver's nodes. */
#ifndef CDDP_LAUNCHER_GPUS_H
#define CDDP_LAUNCHER_GPUS_H

#include <stddef.h>

/* The number of GPUs visible to a process with environment envp: the entries of
 * CUDA_VISIBLE_DEVICES when it is set (empty, -1 or NoDevFiles: none), else the NVIDIA
 * driver's device nodes /dev/nvidia<N>. how gets what was looked at, for messages ("CUDA_VISIBLE_DEVICES=0,1", "2 of
 * /dev/nvidia<N>"). Never blocks. */
int cddp__gpus_visible(char **envp, char *how, size_t size);

#endif /* CDDP_LAUNCHER_GPUS_H */
