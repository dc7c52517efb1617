/* The XML of S3's answers, read by element name (ListObjectsV2, InitiateMultipartUpload,
 * CompleteMultipartUpload, Error). The input is whatever the server (or anything pretending to be
 * it) sent: every scan is bounded by the span's length, nothing allocates or recurses, and input
 * that makes no sense reads as "absent". tests/unit/remote/t-s3-xml.c feeds it hostile cases. */
#include "remote/s3_int.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "common/common.h"

/* The first occurrence of needle (nlen bytes) in [p, p + n), or NULL. */
static const char *find(const char *p, size_t n, const char *needle, size_t nlen)
{
	if (nlen == 0 || n < nlen)
		return NULL;
	return memmem(p, n, needle, nlen);
}

static int is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* Finds "<tag" followed by '>', '/' or white space at or after in->p; sets *after past the
 * opening tag's '>' and *empty for "<tag/>". Returns the '<' or NULL. */
static const char *find_open(struct s3_span in, const char *tag, size_t tlen, const char **after,
			     int *empty)
{
	const char *p = in.p, *end = in.p + in.n;
	while (p < end) {
		const char *lt = memchr(p, '<', (size_t)(end - p));
		if (!lt || (size_t)(end - lt) < tlen + 2)
			return NULL;
		const char *q = lt + 1 + tlen;
		if (memcmp(lt + 1, tag, tlen) == 0 && (*q == '>' || *q == '/' || is_space(*q))) {
			const char *gt = memchr(q, '>', (size_t)(end - q));
			if (!gt)
				return NULL;
			*empty = gt > q && gt[-1] == '/';
			*after = gt + 1;
			return lt;
		}
		p = lt + 1;
	}
	return NULL;
}

int s3_xml_next(struct s3_span *in, const char *tag, struct s3_span *inner)
{
	size_t tlen = strlen(tag);
	const char *after, *end = in->p + in->n;
	int empty;
	if (tlen == 0 || tlen > 64 || !find_open(*in, tag, tlen, &after, &empty))
		return 0;
	if (empty) {
		*inner = (struct s3_span){ after, 0 };
		in->n = (size_t)(end - after);
		in->p = after;
		return 1;
	}
	char close[70] = "</";
	memcpy(close + 2, tag, tlen);
	const char *p = after;
	for (;;) {
		const char *c = find(p, (size_t)(end - p), close, tlen + 2);
		if (!c)
			return 0;
		const char *q = c + tlen + 2;
		while (q < end && is_space(*q))
			q++;
		if (q < end && *q == '>') {
			*inner = (struct s3_span){ after, (size_t)(c - after) };
			in->p = q + 1;
			in->n = (size_t)(end - in->p);
			return 1;
		}
		p = c + 1; /* "</tagX": another element */
	}
}

/* Appends the UTF-8 encoding of code point cp. Returns the bytes written, 0 when it is not a
 * character XML allows or does not fit. */
static size_t put_utf8(unsigned long cp, char *out, size_t room)
{
	if (cp == 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	unsigned char b[4];
	size_t n;
	if (cp < 0x80) {
		b[0] = (unsigned char)cp, n = 1;
	} else if (cp < 0x800) {
		b[0] = (unsigned char)(0xC0 | (cp >> 6)), b[1] = (unsigned char)(0x80 | (cp & 0x3F)), n = 2;
	} else if (cp < 0x10000) {
		b[0] = (unsigned char)(0xE0 | (cp >> 12));
		b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
		b[2] = (unsigned char)(0x80 | (cp & 0x3F)), n = 3;
	} else {
		b[0] = (unsigned char)(0xF0 | (cp >> 18));
		b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
		b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
		b[3] = (unsigned char)(0x80 | (cp & 0x3F)), n = 4;
	}
	if (n > room)
		return 0;
	memcpy(out, b, n);
	return n;
}

/* Decodes the entity at p ('&', at most 12 bytes to its ';') into out. Returns the input bytes
 * consumed and sets *wrote, or 0 for a bad entity. */
static size_t entity(const char *p, size_t n, char *out, size_t room, size_t *wrote)
{
	static const struct { const char *name; char c; } named[] = {
		{ "amp", '&' }, { "lt", '<' }, { "gt", '>' }, { "quot", '"' }, { "apos", '\'' },
	};
	const char *semi = memchr(p, ';', n < 12 ? n : 12);
	if (!semi || room == 0)
		return 0;
	size_t len = (size_t)(semi - p - 1);
	const char *e = p + 1;
	if (len >= 2 && e[0] == '#') {
		int hex = e[1] == 'x' || e[1] == 'X';
		unsigned long cp = 0;
		size_t i = hex ? 2 : 1;
		if (i >= len)
			return 0;
		for (; i < len; i++) {
			char c = e[i];
			int d = c >= '0' && c <= '9' ? c - '0'
				: hex && c >= 'a' && c <= 'f' ? c - 'a' + 10
				: hex && c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
			if (d < 0 || cp > 0x10FFFF)
				return 0;
			cp = cp * (hex ? 16 : 10) + (unsigned long)d;
		}
		*wrote = put_utf8(cp, out, room);
		return *wrote ? len + 2 : 0;
	}
	for (size_t i = 0; i < ARRAY_SIZE(named); i++) {
		if (strlen(named[i].name) == len && memcmp(e, named[i].name, len) == 0) {
			*out = named[i].c;
			*wrote = 1;
			return len + 2;
		}
	}
	return 0;
}

int s3_xml_text(struct s3_span in, const char *tag, char *out, size_t outsz)
{
	struct s3_span t;
	if (outsz == 0)
		return -2;
	if (!s3_xml_next(&in, tag, &t))
		return -1;
	size_t o = 0, i = 0;
	while (i < t.n) {
		size_t w = 1, used = 1;
		if (t.p[i] == '&') {
			used = entity(t.p + i, t.n - i, out + o, outsz - 1 - o, &w);
			if (!used)
				return -2;
		} else if (o + 1 < outsz) {
			out[o] = t.p[i];
		} else {
			return -2;
		}
		o += w;
		i += used;
	}
	out[o] = 0;
	return (int)o;
}

int64_t s3_xml_u64(struct s3_span in, const char *tag)
{
	char b[32];
	if (s3_xml_text(in, tag, b, sizeof b) <= 0)
		return -1;
	const char *p = b;
	while (is_space(*p))
		p++;
	uint64_t v = 0;
	int digits = 0;
	for (; *p >= '0' && *p <= '9'; p++, digits++) {
		uint64_t d = (uint64_t)(*p - '0');
		if (v > ((uint64_t)INT64_MAX - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	while (is_space(*p))
		p++;
	return digits && !*p ? (int64_t)v : -1;
}

int64_t s3_xml_time(const char *iso)
{
	struct tm tm = { 0 };
	int n = 0;
	if (sscanf(iso, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
		   &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 6 || n != 19)
		return 0;
	if (tm.tm_year < 1970 || tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 ||
	    tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60)
		return 0;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (int64_t)timegm(&tm);
}
