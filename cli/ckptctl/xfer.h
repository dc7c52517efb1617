/* Streaming a safetensors file out of a checkpoint (export) in blocks: the file is a byte stream
 * (header, then every tensor's bytes back to back), cut into blocks of at most XFER_BLOCK bytes
 * that end between chunks; several threads each fill a block from an aligned buffer of their own
 * by reading the byte ranges of the tensors that overlap it, and write it at its offset (O_DIRECT
 * where the file system takes it; the 4 KiB page around an unaligned cut is written whole by the
 * second of its two blocks), so that writes overlap the reads of later blocks and nothing goes
 * through a file mapping. */
#ifndef CKPTCTL_XFER_H
#define CKPTCTL_XFER_H

#include <stddef.h>
#include <stdint.h>

struct progress;

/* Most bytes of one block: a multiple of 4 KiB (O_DIRECT alignment). Blocks end on a chunk
 * boundary of the tensor they cut where its grain is known (xfer_src.grain), since a chunk that a
 * block boundary cuts is read (and verified) by both blocks: 6.2% more reading at 16 MiB blocks
 * and 1 MiB chunks on bench/import_bench.sh's 2 GiB file before they did. */
#define XFER_BLOCK (16u << 20)
/* Most threads an export uses (reads wait on the device: more threads than cores help; each
 * holds a block and its reader's buffer: about 24 MiB). */
#define XFER_MAX_THREADS 16

/* Where the tensors' bytes come from: read(ctx[t], k, off, dst, len) fills dst with bytes
 * [off, off + len) of tensor k; thread t only ever uses ctx[t] (a reader of its own: one
 * reader must not be used by two threads at once). Returns 0 or a negative CKPT_E_* code with
 * ckpt_errmsg() set on the calling thread. */
struct xfer_src {
	int (*read)(void *ctx, size_t k, uint64_t off, void *dst, uint64_t len);
	void **ctx;
	unsigned threads; /* contexts in ctx, at least 1 */
	/* Per tensor (NULL: none): a block boundary inside tensor k falls on a multiple of
	 * grain[k] bytes of it (its chunk size), unless that would make the block shorter than
	 * half of XFER_BLOCK; 0: anywhere. */
	const uint64_t *grain;
};

/* The number of reading threads an export of size bytes should use: enough to keep reads and
 * writes in flight, never more than the file has blocks. */
unsigned xfer_threads(uint64_t size);

/* Writes hdr[0..hlen) then tensors 0..nt-1 (nbytes[k] bytes each, k in order) to fd. A seekable
 * fd (a new, empty regular file) is written at offsets by src->threads threads and cut to its
 * exact size; otherwise (a pipe, standard output) block after block by the calling thread.
 * Progress counts tensor bytes. Returns 0; a negative CKPT_E_* code when a read failed (err holds
 * the library's message); or 1 when a write failed (err says which and why). Writes nothing after
 * the first failure; what was written stays (the caller removes its temporary file). */
int xfer_export(int fd, int seekable, const uint8_t *hdr, size_t hlen, const uint64_t *nbytes,
		size_t nt, const struct xfer_src *src, struct progress *bar, char *err,
		size_t errlen);

#endif
