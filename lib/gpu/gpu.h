/* GPU staging behind an ops table. The host provider (malloc/mlock/memcpy) is always built; the
 * CUDA provider is a module, libckpt-cuda.so.0, loaded at run time with dlopen (like UCX's
 * uct/cuda and Open MPI's accelerator framework), so that libckpt.so never links libcudart and
 * works on machines without it. The core speaks of memory types (host, CUDA device N), never of
 * CUDA types. */
#ifndef CKPT_GPU_H
#define CKPT_GPU_H

#include <stddef.h>
#include <stdint.h>

#define CKPT_GPU_ABI 4 /* 2: host_register, wait_flag, mark; 3: no fence op (wait_flag replaced
                        * it); 4: stream_join */
#define CKPT_GPU_MODULE "libckpt-cuda.so.0"
#define CKPT_GPU_ENTRY "ckpt_gpu_module_ops"

/* All functions return 0 or a negative CKPT_E_* code and set the message with ckpt_fail-like
 * text through the `fail` callback the core hands to init. */
struct ckpt_gpu_ops {
	int abi;            /* CKPT_GPU_ABI */
	const char *name;   /* "host", "cuda" */
	/* Called once after loading; returns the number of devices (0: provider unusable). */
	int (*init)(int (*fail)(int err, const char *fmt, ...));
	/* Page-locked host memory of exactly size bytes (no rounding); 4 KiB aligned. */
	int (*alloc_pinned)(size_t size, void **out);
	void (*free_pinned)(void *p, size_t size);
	/* A stream of the library's own on device dev. */
	int (*stream_create)(int dev, void **stream);
	void (*stream_destroy)(void *stream);
	/* Makes lib_stream wait for the work queued so far on user_stream (NULL: legacy default
	 * stream) — so the copy sees what the trainer computed. */
	int (*stream_after)(void *lib_stream, void *user_stream);
	/* Makes lib_stream wait for the work queued so far on other, a library stream too (from
	 * any thread: restore threads follow the ordering their caller made on its own thread). */
	int (*stream_join)(void *lib_stream, void *other);
	/* Asynchronous copies on stream; host memory must be pinned for them to overlap. */
	int (*copy_d2h)(void *dst, const void *src, size_t n, void *stream);
	int (*copy_h2d)(void *dst, const void *src, size_t n, void *stream);
	int (*stream_sync)(void *stream);
	/* Device index of the memory at p, or -1 for host memory. */
	int (*mem_device)(const void *p);
	/* Page-locks host memory the caller allocated (the save pool), so that copies into it are
	 * asynchronous; host_unregister undoes it before the memory is freed. */
	int (*host_register)(void *p, size_t size);
	void (*host_unregister)(void *p);
	/* Makes user_stream (NULL: the legacy default stream of device dev) wait on the device until
	 * the 32-bit word at flag, in memory from alloc_pinned, is >= value; the host sets it later.
	 * The calling thread never blocks (the fence). -CKPT_E_UNSUPPORTED without stream memory
	 * operations (nothing was queued: the caller waits on its thread instead). */
	int (*wait_flag)(void *user_stream, int dev, const uint32_t *flag, uint32_t value);
	/* A mark after the work queued so far on stream, and a blocking (not spinning) wait for it,
	 * which also releases it. */
	int (*mark)(void *stream, void **mark);
	int (*mark_wait)(void *mark);
};

/* The provider for CUDA memory, or NULL when the module is absent or finds no device (the message
 * then says why). Loads the module on first call; thread-safe. */
const struct ckpt_gpu_ops *ckpt_gpu_cuda(void);
/* The host provider (always available). */
const struct ckpt_gpu_ops *ckpt_gpu_host(void);
/* Checks that p (of a tensor `name`) is in the memory it is declared to be in: CKPT_MEM_HOST or
 * CUDA device mem (a device pointer declared as host memory would make memcpy fault). Host
 * declarations are checked only when the CUDA driver is already loaded in the process (no device
 * pointer can exist otherwise), so host-only programs never load the module.
 * Returns 0 or -CKPT_E_INVAL with a message naming `what` and the tensor. */
int ckpt_gpu_check_mem(int mem, const void *p, const char *what, const char *name);
/* Why the CUDA provider is unavailable ("" when it is loaded). */
const char *ckpt_gpu_cuda_error(void);

#endif
