/* libFuzzer target: the S3 backend's XML reader (lib/remote/s3_xml.c) on hostile answers.
 *
 * Input: any bytes, read as the body of a ListObjectsV2, InitiateMultipartUpload or Error answer
 * the way lib/remote reads them. Every element found must lie inside the input and after the
 * previous one; every text must fit its buffer and be NUL-terminated at the returned length;
 * numbers are -1 or below 2^63. Memory errors are AddressSanitizer's job.
 * Replayed by tests/unit/remote/t-s3-xml.c (which renames FUZZ_ENTRY). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "remote/s3_int.h"

#ifndef FUZZ_ENTRY
#define FUZZ_ENTRY LLVMFuzzerTestOneInput
#endif

int FUZZ_ENTRY(const uint8_t *data, size_t size);

static void fx_die(const char *why)
{
	fprintf(stderr, "fuzz-s3xml: %s\n", why);
	abort();
}

static void fx_text(struct s3_span in, const char *tag, size_t outsz)
{
	char out[1100];
	memset(out, 'Z', sizeof out);
	int n = s3_xml_text(in, tag, out, outsz);
	if (n < -2 || (n >= 0 && ((size_t)n >= outsz || out[n] != 0)))
		fx_die("a text that does not fit its buffer or lacks its NUL");
	if (out[outsz] != 'Z')
		fx_die("a text written past its buffer");
}

int FUZZ_ENTRY(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data;
	struct s3_span all = { p, size }, in = all, c;
	static const char *tags[] = { "Key", "Size", "LastModified", "Code", "Message",
				      "UploadId", "IsTruncated", "NextContinuationToken" };
	const char *prev = p;
	unsigned n = 0;
	while (s3_xml_next(&in, "Contents", &c) && n++ < 100000) {
		if (c.p < prev || c.p + c.n > p + size || in.p < c.p + c.n || in.p + in.n != p + size)
			fx_die("an element outside the input or out of order");
		prev = c.p;
		for (size_t i = 0; i < sizeof tags / sizeof *tags; i++)
			fx_text(c, tags[i], i % 2 ? 8 : 1024);
		int64_t v = s3_xml_u64(c, "Size");
		if (v < -1)
			fx_die("a negative size");
	}
	for (size_t i = 0; i < sizeof tags / sizeof *tags; i++)
		fx_text(all, tags[i], 1 + i * 100);
	char when[40];
	if (s3_xml_text(all, "LastModified", when, sizeof when) > 0 && s3_xml_time(when) < 0)
		fx_die("a time before 1970");
	return 0;
}
