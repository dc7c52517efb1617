/* The S3 backend's XML reader (lib/remote/s3_xml.c): what S3 answers look like, and hostile
 * input (truncations at every length, bad entities, unclosed and nested elements, over-long text,
 * huge numbers, random mutations of real answers) read without a crash or a read past the input.
 * The fuzz target tests/fuzz/fuzz-s3xml.c checks the invariants on every input here, and the
 * seeds in tests/fuzz/corpus/s3xml are replayed with every prefix. No server needed. */
#include "helpers.h"

#include <dirent.h>

#include "common/common.h"

#define FUZZ_ENTRY fuzz_s3xml_entry
#include "../../fuzz/fuzz-s3xml.c"
#undef FUZZ_ENTRY

static struct s3_span S(const char *s)
{
	return (struct s3_span){ s, strlen(s) };
}

static void test_list(void)
{
	const char *x =
		"<?xml version=\"1.0\"?><ListBucketResult><KeyCount>2</KeyCount>"
		"<IsTruncated>true</IsTruncated><NextContinuationToken>t/+=</NextContinuationToken>"
		"<Contents><Key>p/a&amp;b&lt;&#x41;&#66;&#x20AC;</Key><Size>12</Size>"
		"<LastModified>2026-12-02T13:30:20.000Z</LastModified></Contents>"
		"<Contents ><Key>p/c</Key><Size> 0 </Size></Contents ></ListBucketResult>";
	struct s3_span in = S(x), c;
	char b[64];
	CHECK(s3_xml_next(&in, "Contents", &c) == 1);
	CHECK(s3_xml_text(c, "Key", b, sizeof b) == 11 && !strcmp(b, "p/a&b<AB\xE2\x82\xAC"));
	CHECK(s3_xml_u64(c, "Size") == 12);
	CHECK(s3_xml_text(c, "LastModified", b, sizeof b) > 0 && s3_xml_time(b) == 1796218220);
	CHECK(s3_xml_next(&in, "Contents", &c) == 1);
	CHECK(s3_xml_text(c, "Key", b, sizeof b) == 3 && !strcmp(b, "p/c"));
	CHECK(s3_xml_u64(c, "Size") == 0);
	CHECK(s3_xml_next(&in, "Contents", &c) == 0);
	CHECK(s3_xml_text(S(x), "IsTruncated", b, sizeof b) == 4 && !strcmp(b, "true"));
	CHECK(s3_xml_text(S(x), "NextContinuationToken", b, sizeof b) == 4);
	/* <KeyCount> is not <Key>; the first <Key> is inside the first <Contents> */
	CHECK(s3_xml_text(S(x), "Key", b, sizeof b) == 11);
	CHECK(s3_xml_u64(S(x), "KeyCount") == 2);
}

static void test_hostile(void)
{
	char b[8];
	struct s3_span c;
	CHECK(s3_xml_text(S("<Key>12345678</Key>"), "Key", b, sizeof b) == -2); /* 8 + NUL > 8 */
	CHECK(s3_xml_text(S("<Key>1234567</Key>"), "Key", b, sizeof b) == 7);
	CHECK(s3_xml_text(S("<Key>123456&amp;</Key>"), "Key", b, sizeof b) == 7);
	CHECK(s3_xml_text(S("<Key>1234567&amp;</Key>"), "Key", b, sizeof b) == -2);
	CHECK(s3_xml_text(S("<Key>unclosed"), "Key", b, sizeof b) == -1);
	CHECK(s3_xml_text(S("<Key"), "Key", b, sizeof b) == -1);
	CHECK(s3_xml_text(S("<"), "Key", b, sizeof b) == -1);
	CHECK(s3_xml_text(S(""), "Key", b, sizeof b) == -1);
	CHECK(s3_xml_text(S("<Key/>"), "Key", b, sizeof b) == 0);
	char b16[16];
	CHECK(s3_xml_text(S("<Key>a</Keyx></Key >"), "Key", b16, sizeof b16) == 8 &&
	      !strcmp(b16, "a</Keyx>"));
	CHECK(s3_xml_text(S("<Key>a</Key  >"), "Key", b, sizeof b) == 1);
	const char *bad[] = { "&amp", "&;", "&#;", "&#x;", "&#0;", "&#xD800;", "&#1114112;",
			      "&#99999999999999;", "&nbsp;", "&#x-1;", "&#12a;" };
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		char in[64];
		snprintf(in, sizeof in, "<Key>%s</Key>", bad[i]);
		CHECK(s3_xml_text(S(in), "Key", b, sizeof b) == -2);
	}
	CHECK(s3_xml_u64(S("<Size>9223372036854775807</Size>"), "Size") == INT64_MAX);
	CHECK(s3_xml_u64(S("<Size>9223372036854775808</Size>"), "Size") == -1);
	CHECK(s3_xml_u64(S("<Size>18446744073709551616</Size>"), "Size") == -1);
	CHECK(s3_xml_u64(S("<Size>4x</Size>"), "Size") == -1);
	CHECK(s3_xml_u64(S("<Size>-4</Size>"), "Size") == -1);
	CHECK(s3_xml_u64(S("<Size></Size>"), "Size") == -1);
	CHECK(s3_xml_time("2026-13-02T13:30:20Z") == 0 && s3_xml_time("") == 0 &&
	      s3_xml_time("1969-12-31T23:59:59Z") == 0 && s3_xml_time("2026-12-02") == 0);
	/* nested elements of one name: the first closing tag ends the outer one */
	struct s3_span in = S("<C><C>x</C></C>");
	CHECK(s3_xml_next(&in, "C", &c) == 1 && c.n == 4);
	/* a span that ends inside a tag is never read past */
	const char *x = "<Key>abc</Key>";
	for (size_t n = 0; n < strlen(x); n++) {
		char *t = malloc(n ? n : 1); /* exact size: ASan sees a read past it */
		memcpy(t, x, n);
		CHECK(s3_xml_text((struct s3_span){ t, n }, "Key", b, sizeof b) == -1);
		free(t);
	}
	/* a megabyte of '<' and of "<Contents>" ends, and in linear time */
	size_t big = 1u << 20;
	char *m = malloc(big);
	memset(m, '<', big);
	in = (struct s3_span){ m, big };
	CHECK(s3_xml_next(&in, "Contents", &c) == 0);
	for (size_t i = 0; i + 10 <= big; i += 10)
		memcpy(m + i, "<Contents>", 10);
	in = (struct s3_span){ m, big };
	CHECK(s3_xml_next(&in, "Contents", &c) == 0);
	free(m);
}

static size_t replay(const char *dir, char *seeds[], size_t max)
{
	DIR *d = opendir(dir);
	size_t n = 0;
	struct dirent *e;
	REQUIRE(d);
	while ((e = readdir(d)) && n < max) {
		if (e->d_name[0] == '.')
			continue;
		char p[4400];
		snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
		FILE *f = fopen(p, "rb");
		REQUIRE(f);
		char *b = calloc(1, 65536);
		size_t len = fread(b, 1, 65535, f);
		fclose(f);
		fuzz_s3xml_entry((const uint8_t *)b, len);
		for (size_t k = 0; k < len; k++) { /* every prefix, in a buffer of exactly k bytes */
			uint8_t *t = malloc(k ? k : 1);
			memcpy(t, b, k);
			fuzz_s3xml_entry(t, k);
			free(t);
		}
		seeds[n++] = b;
	}
	closedir(d);
	return n;
}

/* Random mutations of the seeds (deterministic): flipped bytes, inserted '<', '&', '>', cuts. */
static void mutate(char *seeds[], size_t n)
{
	uint64_t st = 42;
	char buf[4096];
	for (int it = 0; it < 20000; it++) {
		const char *s = seeds[t_rand(&st) % n];
		size_t len = strlen(s) < sizeof buf ? strlen(s) : sizeof buf;
		memcpy(buf, s, len);
		for (int k = (int)(t_rand(&st) % 8); k >= 0 && len; k--) {
			size_t at = t_rand(&st) % len;
			static const char pick[] = "<>&;#x/ Contents Key";
			buf[at] = t_rand(&st) % 2 ? (char)t_rand(&st) : pick[t_rand(&st) % (sizeof pick - 1)];
		}
		size_t cut = t_rand(&st) % 4 ? len : t_rand(&st) % (len + 1);
		uint8_t *t = malloc(cut ? cut : 1);
		memcpy(t, buf, cut);
		fuzz_s3xml_entry(t, cut);
		free(t);
	}
}

int main(void)
{
	test_list();
	test_hostile();
	char *seeds[64];
	const char *root = getenv("CKPT_FUZZ_CORPUS");
	char dir[4096];
	snprintf(dir, sizeof dir, "%s/s3xml", root ? root : "tests/fuzz/corpus");
	size_t n = replay(dir, seeds, ARRAY_SIZE(seeds));
	CHECK(n >= 5);
	if (n)
		mutate(seeds, n);
	printf("%zu seeds replayed with every prefix, 20000 mutations\n", n);
	for (size_t i = 0; i < n; i++)
		free(seeds[i]);
	return t_done();
}
