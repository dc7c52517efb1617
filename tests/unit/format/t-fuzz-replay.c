/* Replays the fuzz corpus (every file under tests/fuzz/corpus/<target>/) through the fuzz
 * targets' entry points, so that every seed and every crasher found by libFuzzer stays covered by
 * `make check` without libFuzzer. Each file goes through every target (a manifest is also hostile
 * input for the record decoders, and any manifest for fuzz-dist's multi-rank metadata parsers).
 * A target aborts on a failed invariant; the sanitizer build catches memory errors. */
#include "helpers.h"

#include <dirent.h>
#include <sys/stat.h>

#define FUZZ_ENTRY fuzz_manifest_entry
#include "../../fuzz/fuzz-manifest.c"
#undef FUZZ_ENTRY
#define FUZZ_ENTRY fuzz_records_entry
#include "../../fuzz/fuzz-records.c"
#undef FUZZ_ENTRY
#define FUZZ_ENTRY fuzz_codec_entry
#include "../../fuzz/fuzz-codec.c"
#undef FUZZ_ENTRY
#define FUZZ_ENTRY fuzz_dist_entry
#include "../../fuzz/fuzz-dist.c"
#undef FUZZ_ENTRY

static int read_file(const char *path, uint8_t **out, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return -1;
	size_t cap = 4096, n = 0;
	uint8_t *b = malloc(cap);
	size_t r;
	while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
		n += r;
		if (n == cap) {
			uint8_t *nb = realloc(b, cap *= 2);
			if (!nb) {
				free(b);
				b = NULL;
			}
			b = nb;
		}
	}
	fclose(f);
	if (!b)
		return -1;
	*out = b;
	*len = n;
	return 0;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static size_t replay_dir(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d) {
		fprintf(stderr, "no corpus directory %s\n", dir);
		t_failures++;
		return 0;
	}
	char **names = NULL;
	size_t n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		names = realloc(names, (n + 1) * sizeof *names);
		REQUIRE(names);
		names[n++] = strdup(e->d_name);
	}
	closedir(d);
	qsort(names, n, sizeof *names, cmp_str);
	size_t done = 0;
	for (size_t i = 0; i < n; i++) {
		char p[8192];
		snprintf(p, sizeof p, "%s/%s", dir, names[i]);
		struct stat st;
		uint8_t *b;
		size_t len;
		if (stat(p, &st) || !S_ISREG(st.st_mode) || read_file(p, &b, &len)) {
			free(names[i]);
			continue;
		}
		fuzz_manifest_entry(b, len);
		fuzz_records_entry(b, len);
		fuzz_codec_entry(b, len);
		fuzz_dist_entry(b, len);
		/* Every prefix too (cheap for these small files): truncation at every length. */
		for (size_t k = 0; k < len && len <= 16384; k += 1 + k / 64) {
			fuzz_manifest_entry(b, k);
			fuzz_records_entry(b, k);
			fuzz_dist_entry(b, k);
		}
		free(b);
		free(names[i]);
		done++;
	}
	free(names);
	printf("%s: %zu inputs replayed\n", dir, done);
	return done;
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *root = getenv("CKPT_FUZZ_CORPUS");
	char dir[4096];
	static const char *targets[] = {"manifest", "records", "codec", "dist"};
	size_t total = 0;
	for (size_t i = 0; i < sizeof targets / sizeof *targets; i++) {
		snprintf(dir, sizeof dir, "%s/%s", root ? root : "tests/fuzz/corpus", targets[i]);
		size_t n = replay_dir(dir);
		CHECK(n > 0);
		total += n;
	}
	printf("%zu corpus files replayed\n", total);
	return t_done();
}
