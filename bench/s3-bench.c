/* Upload or download one file through the S3 backend (rmt_s3_ops), for bench/s3_bench.sh, which
 * times it against `aws s3 cp` on the same radosgw. Links the tests' archive (the backend is
 * internal to the library).
 *
 *   s3-bench URL put KEY FILE   multipart upload of FILE (S3_BENCH_PARALLEL parts in flight,
 *                               S3_BENCH_PART bytes each; defaults 8 and 16 MiB, as awscli's
 *                               10 requests of 8 MiB)
 *   s3-bench URL get KEY FILE   ranged GETs of S3_BENCH_PART bytes on S3_BENCH_PARALLEL threads,
 *                               each written to FILE at its offset
 * Prints the seconds it took. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"
#include "remote/remote.h"

struct dl {
	struct rmt *r;
	const char *key;
	int fd;
	uint64_t size, part;
	pthread_mutex_t mu;
	uint64_t next;
	int err;
};

static void *dl_thread(void *arg)
{
	struct dl *d = arg;
	char *buf = malloc(d->part);
	for (;;) {
		pthread_mutex_lock(&d->mu);
		uint64_t off = d->next;
		d->next += d->part;
		int stop = d->err || off >= d->size || !buf;
		pthread_mutex_unlock(&d->mu);
		if (stop)
			break;
		uint64_t n = MIN(d->part, d->size - off);
		int rc = rmt_s3_ops.get(d->r, d->key, off, n, buf);
		if (rc == 0 && pwrite(d->fd, buf, n, (off_t)off) != (ssize_t)n)
			rc = -CKPT_E_IO;
		if (rc) {
			fprintf(stderr, "get %s at %llu: %s\n", d->key, (unsigned long long)off,
				ckpt_errmsg());
			pthread_mutex_lock(&d->mu);
			d->err = rc;
			pthread_mutex_unlock(&d->mu);
			break;
		}
	}
	free(buf);
	return NULL;
}

static int download(struct rmt *r, const char *key, const char *path, unsigned par, uint64_t part)
{
	struct dl d = { .r = r, .key = key, .part = part };
	pthread_mutex_init(&d.mu, NULL);
	if (rmt_s3_ops.stat(r, key, &d.size, NULL))
		return fprintf(stderr, "stat %s: %s\n", key, ckpt_errmsg()), 1;
	d.fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (d.fd < 0 || ftruncate(d.fd, (off_t)d.size))
		return perror(path), 1;
	pthread_t t[64];
	unsigned nt = par < 64 ? par : 64;
	for (unsigned i = 0; i < nt; i++)
		pthread_create(&t[i], NULL, dl_thread, &d);
	for (unsigned i = 0; i < nt; i++)
		pthread_join(t[i], NULL);
	close(d.fd);
	return d.err ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc != 5 || (strcmp(argv[2], "put") && strcmp(argv[2], "get"))) {
		fprintf(stderr, "usage: s3-bench URL put|get KEY FILE\n");
		return 2;
	}
	const char *p = getenv("S3_BENCH_PARALLEL"), *ps = getenv("S3_BENCH_PART");
	struct rmt_config cfg = { .parallel = p ? (unsigned)atoi(p) : 8,
				  .part_size = ps ? strtoull(ps, NULL, 0) : 16u << 20 };
	struct rmt *r = NULL;
	if (rmt_s3_ops.open(argv[1], &cfg, &r))
		return fprintf(stderr, "open %s: %s\n", argv[1], ckpt_errmsg()), 1;
	double t0 = ckpt_now();
	int rc;
	if (!strcmp(argv[2], "put")) {
		int fd = open(argv[4], O_RDONLY);
		struct stat st;
		if (fd < 0 || fstat(fd, &st))
			return perror(argv[4]), 1;
		struct rmt_src src = { .fd = fd, .len = (uint64_t)st.st_size };
		rc = rmt_s3_ops.put(r, argv[3], &src, 0, NULL, NULL);
		if (rc)
			fprintf(stderr, "put %s: %s\n", argv[3], ckpt_errmsg());
		close(fd);
	} else {
		rc = download(r, argv[3], argv[4], cfg.parallel, cfg.part_size);
	}
	printf("%.3f\n", ckpt_now() - t0);
	rmt_s3_ops.close(r);
	return rc ? 1 : 0;
}
