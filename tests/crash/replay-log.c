/* Replays a dm-log-writes log onto a device, one flush point at a time (the power-cut test,
 * tests/crash/t-powercut.sh). The log: a super block in the first sector (magic, version,
 * number of entries, sector size), then entries; each entry is one sector holding
 * {sector, nr_sectors, flags, data_len} (a mark's text follows in the same sector), then, for a
 * write, nr_sectors sectors of data. Sectors are the log's sector size.
 *
 *   replay-log LOG DEV STATE    applies the entries after the one STATE names (0 at first) up to
 *                               and including the next flush (or FUA write), then prints
 *                               "POINT <entry> <flushes so far>" and every mark seen so far
 *                               ("MARK <text>"), and writes the new position to STATE. With no
 *                               flush left, applies the rest, prints "END ..." and the marks,
 *                               and exits 1.
 *
 * Built statically on the host and run in the QEMU guest, where nothing else is available. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LOG_MAGIC 0x6a736677736872ULL
#define FLUSH 1u
#define FUA 2u
#define DISCARD 4u
#define MARK 8u

struct super { uint64_t magic, version, nr_entries; uint32_t sectorsize; } __attribute__((packed));
struct entry { uint64_t sector, nr_sectors, flags, data_len; } __attribute__((packed));

static void die(const char *what)
{
	fprintf(stderr, "replay-log: %s: %s\n", what, strerror(errno));
	exit(2);
}

static void read_at(int fd, void *buf, size_t n, uint64_t off)
{
	for (size_t got = 0; got < n;) {
		ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
		if (r <= 0) {
			if (r == 0)
				errno = EIO;
			die("read log");
		}
		got += (size_t)r;
	}
}

static void write_at(int fd, const void *buf, size_t n, uint64_t off)
{
	for (size_t put = 0; put < n;) {
		ssize_t r = pwrite(fd, (const char *)buf + put, n - put, (off_t)(off + put));
		if (r <= 0)
			die("write device");
		put += (size_t)r;
	}
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: replay-log LOG DEV STATE\n");
		return 2;
	}
	int log = open(argv[1], O_RDONLY), dev = open(argv[2], O_RDWR);
	if (log < 0 || dev < 0)
		die("open");
	struct super sb;
	read_at(log, &sb, sizeof sb, 0);
	if (sb.magic != LOG_MAGIC || sb.sectorsize < 512 || sb.sectorsize > 65536) {
		fprintf(stderr, "replay-log: %s: not a dm-log-writes log\n", argv[1]);
		return 2;
	}
	uint64_t ss = sb.sectorsize, done = 0, flushes = 0;
	FILE *st = fopen(argv[3], "r");
	if (st) {
		if (fscanf(st, "%llu %llu", (unsigned long long *)&done, (unsigned long long *)&flushes) != 2)
			done = flushes = 0;
		fclose(st);
	}
	/* Walk from the start (entries have variable length); marks are printed each time. */
	uint64_t off = ss, i;
	uint8_t *blk = malloc(ss), *data = NULL;
	size_t cap = 0;
	char marks[1 << 16] = "";
	int stopped = 0;
	for (i = 1; i <= sb.nr_entries; i++) {
		read_at(log, blk, ss, off);
		struct entry e;
		memcpy(&e, blk, sizeof e);
		off += ss;
		if (e.flags & MARK) {
			size_t l = e.data_len < ss - sizeof e ? (size_t)e.data_len : ss - sizeof e;
			size_t used = strlen(marks);
			snprintf(marks + used, sizeof marks - used, "MARK %.*s\n", (int)l,
				 (const char *)blk + sizeof e);
		}
		uint64_t bytes = (e.flags & DISCARD) ? 0 : e.nr_sectors * ss;
		if (i > done && bytes) {
			if (bytes > cap && !(data = realloc(data, cap = bytes)))
				die("memory");
			read_at(log, data, bytes, off);
			write_at(dev, data, bytes, e.sector * ss);
		}
		if (i > done && (e.flags & DISCARD)) {
			/* What a discarded range reads back as is unspecified: zeros here. */
			uint64_t n = e.nr_sectors * ss;
			if (n > cap && !(data = realloc(data, cap = n)))
				die("memory");
			memset(data, 0, n);
			write_at(dev, data, n, e.sector * ss);
		}
		off += bytes;
		if (i > done && (e.flags & (FLUSH | FUA))) {
			flushes++;
			stopped = 1;
			break;
		}
	}
	if (!stopped) {
		printf("END %llu entries, %llu flush points\n%s", (unsigned long long)sb.nr_entries,
		       (unsigned long long)flushes, marks);
		return 1;
	}
	if (fsync(dev))
		die("fsync device");
	printf("POINT %llu %llu\n%s", (unsigned long long)i, (unsigned long long)flushes, marks);
	st = fopen(argv[3], "w");
	if (!st || fprintf(st, "%llu %llu\n", (unsigned long long)i, (unsigned long long)flushes) < 0 ||
	    fclose(st))
		die("write state");
	return 0;
}
