/* verify notices what the chunk digests cannot see: nonzero bytes in a record's padding
 * and bytes appended to a pack. Restore is unaffected (the data is intact); verify reports
 * damage naming the pack. */
#include "helpers.h"

#include <fcntl.h>
#include <unistd.h>

static char msg[8192];

static void on_damage(const ckpt_damage *d, void *arg)
{
	(void)arg;
	snprintf(msg, sizeof msg, "%s", d->message ? d->message : "");
}

/* Damage count of the latest checkpoint (the last message in msg). */
static long verify(const char *dir)
{
	ckpt_store *s = t_open_store(dir, 0, 0);
	reader1 *r;
	REQUIRE(reader1_open(s, CKPT_STEP_LATEST, &r) == 0);
	msg[0] = 0;
	long n = reader1_verify(r, on_damage, NULL, NULL);
	reader1_close(r);
	ckpt_store_close(s);
	return n;
}

static void append_to(const char *file, size_t n)
{
	int fd = open(file, O_WRONLY | O_APPEND);
	REQUIRE(fd >= 0);
	char *z = calloc(1, n);
	REQUIRE(write(fd, z, n) == (ssize_t)n);
	free(z);
	close(fd);
}

int main(void)
{
	char *dir = t_tmpdir("vtail");
	static uint8_t data[3 * 65536 + 1000];
	t_fill(data, sizeof data, 7);
	ckpt_store *s = t_open_store(dir, 65536, 0);
	save1 *sv;
	uint64_t shape[1] = {sizeof data};
	REQUIRE(save1_begin(s, 1, &sv) == 0);
	REQUIRE(save1_add_tensor(sv, "w", CKPT_DTYPE_U8, 1, shape, CKPT_MEM_HOST, data) == 0);
	REQUIRE(save1_commit(sv, NULL) == 0);
	/* The last chunk (1000 bytes) leaves padding in its record. */
	reader1 *r;
	REQUIRE(reader1_open(s, 1, &r) == 0);
	ckpt_chunk_info ci;
	REQUIRE(reader1_chunk(r, 0, 3, &ci) == 0);
	reader1_close(r);
	ckpt_store_close(s);
	REQUIRE(64 + ci.stored_bytes < ci.disk_bytes);
	char pack[4096];
	snprintf(pack, sizeof pack, "%s/packs/%08u.pack", dir, ci.pack_id);
	CHECK(verify(dir) == 0);

	t_flip_byte(pack, ci.offset + 64 + ci.stored_bytes + 5);
	CHECK(verify(dir) == 1);
	CHECK(strstr(msg, "padding") && strstr(msg, pack));
	t_flip_byte(pack, ci.offset + 64 + ci.stored_bytes + 5);
	CHECK(verify(dir) == 0);

	append_to(pack, 4096); /* a whole block of zeros: no record header */
	CHECK(verify(dir) == 1);
	CHECK(strstr(msg, "not records") && strstr(msg, pack));
	REQUIRE(truncate(pack, (off_t)(ci.offset + ci.disk_bytes)) == 0);
	CHECK(verify(dir) == 0);
	append_to(pack, 100); /* a few bytes */
	CHECK(verify(dir) == 1);
	CHECK(strstr(msg, "not records"));

	/* Restore still returns the data (its digests are fine). */
	s = t_open_store(dir, 0, 0);
	REQUIRE(reader1_open(s, 1, &r) == 0);
	static uint8_t got[sizeof data];
	CHECK_OK(reader1_restore(r, 0, CKPT_MEM_HOST, got, sizeof got));
	CHECK(!memcmp(got, data, sizeof data));
	reader1_close(r);
	ckpt_store_close(s);
	t_rmrf(dir);
	free(dir);
	return t_done();
}
