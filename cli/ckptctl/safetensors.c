/* safetensors: a strict parser of the JSON header and a writer of the canonical one. See
 * safetensors.h for the rules enforced. */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------------
 * Parser
 * ---------------------------------------------------------------------------------------- */
struct parser {
	const char *s;
	size_t n, i;
	char *err;
	size_t errlen;
};

static int perr(struct parser *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int perr(struct parser *p, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(p->err, p->errlen, fmt, ap);
	va_end(ap);
	return -1;
}

/* A syntax error at the current position. */
static int psyn(struct parser *p, const char *what)
{
	if (p->i >= p->n)
		return perr(p, "bad JSON in header: unexpected end of header, expected %s", what);
	unsigned char c = (unsigned char)p->s[p->i];
	if (c >= 0x21 && c < 0x7f)
		return perr(p, "bad JSON in header at byte %zu: expected %s, found '%c'", p->i, what,
			    c);
	return perr(p, "bad JSON in header at byte %zu: expected %s, found byte 0x%02x", p->i, what,
		    c);
}

static void ws(struct parser *p)
{
	while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' ||
			       p->s[p->i] == '\r'))
		p->i++;
}

static bool eat(struct parser *p, char c)
{
	ws(p);
	if (p->i < p->n && p->s[p->i] == c) {
		p->i++;
		return true;
	}
	return false;
}

static bool peek(struct parser *p, char c)
{
	ws(p);
	return p->i < p->n && p->s[p->i] == c;
}

/* Length of the valid UTF-8 sequence at s[0..n), or 0 if invalid (overlong forms, surrogates and
 * code points above U+10FFFF are invalid). */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	if (c < 0x80)
		return 1;
	size_t len;
	unsigned char lo = 0x80, hi = 0xbf;
	if (c >= 0xc2 && c <= 0xdf)
		len = 2;
	else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		if (c == 0xe0)
			lo = 0xa0;
		else if (c == 0xed)
			hi = 0x9f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		if (c == 0xf0)
			lo = 0x90;
		else if (c == 0xf4)
			hi = 0x8f;
	} else
		return 0;
	if (n < len || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t k = 2; k < len; k++)
		if (s[k] < 0x80 || s[k] > 0xbf)
			return 0;
	return len;
}

static size_t put_utf8(char *o, uint32_t cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | (cp >> 6));
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | (cp >> 12));
		o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | (cp >> 18));
	o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

static int hex4(struct parser *p, uint32_t *out)
{
	uint32_t v = 0;
	for (int k = 0; k < 4; k++) {
		if (p->i >= p->n)
			return psyn(p, "4 hex digits after \\u");
		char c = p->s[p->i];
		int d;
		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			return psyn(p, "4 hex digits after \\u");
		v = v * 16 + (uint32_t)d;
		p->i++;
	}
	*out = v;
	return 0;
}

/* After "\u": the code point of the escape, a surrogate pair ("\uD83D\uDE00") joined into one.
 * Returns 0, or -1 (reported). */
static int unicode_escape(struct parser *p, uint32_t *out)
{
	uint32_t cp, lo;
	if (hex4(p, &cp))
		return -1;
	if (cp >= 0xdc00 && cp <= 0xdfff)
		return perr(p, "bad JSON in header at byte %zu: unpaired surrogate \\u%04X", p->i,
			    cp);
	if (cp >= 0xd800 && cp <= 0xdbff) {
		if (p->i + 2 > p->n || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u')
			return perr(p, "bad JSON in header at byte %zu: unpaired surrogate \\u%04X",
				    p->i, cp);
		p->i += 2;
		if (hex4(p, &lo))
			return -1;
		if (lo < 0xdc00 || lo > 0xdfff)
			return perr(p, "bad JSON in header at byte %zu: unpaired surrogate \\u%04X",
				    p->i, cp);
		cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
	}
	*out = cp;
	return 0;
}

/* At the character after a backslash: writes what the escape stands for at o. what and at (the
 * byte of the opening quote) name the string in errors. Returns the bytes written, or -1
 * (reported). An escape is 2 bytes (6 for \uXXXX, 12 for a pair), its UTF-8 at most 4: the
 * decoded string never outgrows the encoded one. */
static int string_escape(struct parser *p, char *o, const char *what, size_t at)
{
	if (p->i >= p->n)
		return psyn(p, "an escape character");
	char e = p->s[p->i++];
	switch (e) {
	case '"': *o = '"'; return 1;
	case '\\': *o = '\\'; return 1;
	case '/': *o = '/'; return 1;
	case 'b': *o = '\b'; return 1;
	case 'f': *o = '\f'; return 1;
	case 'n': *o = '\n'; return 1;
	case 'r': *o = '\r'; return 1;
	case 't': *o = '\t'; return 1;
	case 'u':
		break;
	default:
		p->i--;
		return psyn(p, "a valid escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
	}
	uint32_t cp = 0; /* set on success: gcc cannot tell */
	if (unicode_escape(p, &cp))
		return -1;
	if (cp == 0)
		return perr(p, "%s at byte %zu contains U+0000, which is not supported", what, at);
	return (int)put_utf8(o, cp);
}

/* Parses a JSON string into a malloc'd NUL-terminated UTF-8 string. what names it in errors.
 * A string holding U+0000 is rejected: names and metadata are C strings. */
static int parse_string(struct parser *p, char **out, const char *what)
{
	*out = NULL;
	ws(p);
	if (p->i >= p->n || p->s[p->i] != '"')
		return psyn(p, what);
	size_t start = ++p->i;
	/* The decoded string is never longer than the encoded one. */
	size_t end = start;
	while (end < p->n && p->s[end] != '"')
		end += (p->s[end] == '\\' && end + 1 < p->n) ? 2 : 1;
	char *o = malloc(end - start + 1);
	if (!o)
		return perr(p, "out of memory");
	size_t k = 0;
	for (;;) {
		if (p->i >= p->n) {
			perr(p, "bad JSON in header: unterminated string starting at byte %zu",
			     start - 1);
			goto fail;
		}
		unsigned char c = (unsigned char)p->s[p->i];
		if (c == '"')
			break;
		if (c < 0x20) {
			perr(p, "bad JSON in header at byte %zu: control character 0x%02x in a "
			     "string (must be escaped)", p->i, c);
			goto fail;
		}
		if (c == '\\') {
			p->i++;
			int l = string_escape(p, o + k, what, start - 1);
			if (l < 0)
				goto fail;
			k += (size_t)l;
			continue;
		}
		size_t l = utf8_len((const unsigned char *)p->s + p->i, p->n - p->i);
		if (!l) {
			perr(p, "bad JSON in header at byte %zu: invalid UTF-8", p->i);
			goto fail;
		}
		memcpy(o + k, p->s + p->i, l);
		k += l;
		p->i += l;
	}
	p->i++; /* the closing quote */
	o[k] = 0;
	*out = o;
	return 0;
fail:
	free(o);
	return -1;
}

/* Parses a JSON number that must be a non-negative integer fitting in uint64_t. */
static int parse_uint(struct parser *p, uint64_t *out, const char *ctx, const char *field)
{
	ws(p);
	size_t st = p->i;
	/* Scan the whole JSON number token so that 1.5 or 1e3 are named as such. */
	size_t e = st;
	if (e < p->n && p->s[e] == '-')
		e++;
	while (e < p->n && ((p->s[e] >= '0' && p->s[e] <= '9') || p->s[e] == '.' || p->s[e] == 'e' ||
			    p->s[e] == 'E' || p->s[e] == '+' || p->s[e] == '-'))
		e++;
	if (e == st)
		return perr(p, "%s: \"%s\" must hold non-negative integers (header byte %zu)", ctx,
			    field, st);
	uint64_t v = 0;
	bool ok = p->s[st] >= '0' && p->s[st] <= '9' && !(p->s[st] == '0' && e - st > 1);
	for (size_t k = st; ok && k < e; k++) {
		if (p->s[k] < '0' || p->s[k] > '9' || v > (UINT64_MAX - 9) / 10) {
			ok = false;
			break;
		}
		v = v * 10 + (uint64_t)(p->s[k] - '0');
	}
	if (!ok)
		return perr(p, "%s: \"%s\" holds %.*s, not a non-negative integer that fits in 64 "
			    "bits (header byte %zu)", ctx, field, (int)(e - st > 40 ? 40 : e - st),
			    p->s + st, st);
	p->i = e;
	*out = v;
	return 0;
}

/* Parses an array of integers; at most max of them. */
static int parse_uint_array(struct parser *p, uint64_t *v, unsigned max, unsigned *count,
			    const char *ctx, const char *field)
{
	ws(p);
	if (!eat(p, '['))
		return perr(p, "%s: \"%s\" must be an array of non-negative integers (header byte "
			    "%zu)", ctx, field, p->i);
	unsigned n = 0;
	if (!eat(p, ']')) {
		for (;;) {
			uint64_t x = 0;
			if (parse_uint(p, &x, ctx, field))
				return -1;
			if (n >= max)
				return perr(p, "%s: \"%s\" has more than %u elements", ctx, field, max);
			v[n++] = x;
			if (eat(p, ']'))
				break;
			if (!eat(p, ','))
				return psyn(p, "',' or ']'");
		}
	}
	*count = n;
	return 0;
}

static int add_tensor(struct st_header *h, size_t *cap, struct st_tensor *t)
{
	if (h->ntensors == *cap) {
		size_t nc = *cap ? *cap * 2 : 16;
		void *nt = realloc(h->tensors, nc * sizeof *h->tensors);
		if (!nt)
			return -1;
		h->tensors = nt;
		*cap = nc;
	}
	h->tensors[h->ntensors++] = *t;
	return 0;
}

/* ctx for messages about a tensor: "tensor \"name\"". */
static const char *tctx(const char *name, char *buf, size_t len)
{
	char q[160];
	snprintf(buf, len, "tensor %s", st_quote(name, q, sizeof q, 100));
	return buf;
}

static int parse_tensor(struct parser *p, char *name, struct st_tensor *t)
{
	char ctx[200];
	tctx(name, ctx, sizeof ctx);
	memset(t, 0, sizeof *t);
	t->name = name;
	ws(p);
	if (!eat(p, '{'))
		return perr(p, "%s: expected an object {\"dtype\", \"shape\", \"data_offsets\"} "
			    "(header byte %zu)", ctx, p->i);
	bool have_dtype = false, have_shape = false, have_off = false;
	if (!eat(p, '}')) {
		for (;;) {
			char *key;
			if (parse_string(p, &key, "a field name"))
				return -1;
			if (!eat(p, ':')) {
				free(key);
				return psyn(p, "':'");
			}
			int r = 0;
			if (!strcmp(key, "dtype")) {
				char *dt;
				if (have_dtype)
					r = perr(p, "%s: duplicate field \"dtype\"", ctx);
				else if (!peek(p, '"'))
					r = perr(p, "%s: \"dtype\" must be a string (header byte %zu)",
						 ctx, p->i);
				else if (parse_string(p, &dt, "a dtype"))
					r = -1;
				else {
					t->dtype = ckpt_dtype_from_name(dt);
					if (!t->dtype) {
						char q[80];
						r = perr(p, "%s: unknown dtype %s", ctx,
							 st_quote(dt, q, sizeof q, 40));
					}
					free(dt);
				}
				have_dtype = true;
			} else if (!strcmp(key, "shape")) {
				if (have_shape)
					r = perr(p, "%s: duplicate field \"shape\"", ctx);
				else
					r = parse_uint_array(p, t->shape, CKPT_MAX_DIMS, &t->ndim, ctx,
							     "shape");
				have_shape = true;
			} else if (!strcmp(key, "data_offsets")) {
				uint64_t o[2];
				unsigned no;
				if (have_off)
					r = perr(p, "%s: duplicate field \"data_offsets\"", ctx);
				else if (!(r = parse_uint_array(p, o, 2, &no, ctx, "data_offsets"))) {
					if (no != 2)
						r = perr(p, "%s: \"data_offsets\" must be [begin, end]",
							 ctx);
					t->begin = o[0];
					t->end = o[1];
				}
				have_off = true;
			} else {
				char q[80];
				r = perr(p, "%s: unknown field %s", ctx, st_quote(key, q, sizeof q, 40));
			}
			free(key);
			if (r)
				return r;
			if (eat(p, '}'))
				break;
			if (!eat(p, ','))
				return psyn(p, "',' or '}'");
		}
	}
	if (!have_dtype || !have_shape || !have_off)
		return perr(p, "%s: missing \"%s\"", ctx,
			    !have_dtype ? "dtype" : !have_shape ? "shape" : "data_offsets");
	return 0;
}

static int parse_meta(struct parser *p, struct st_header *h)
{
	size_t cap = 0;
	ws(p);
	if (!eat(p, '{'))
		return perr(p, "\"__metadata__\" must be an object of strings (header byte %zu)", p->i);
	if (eat(p, '}'))
		return 0;
	for (;;) {
		char *k, *v;
		if (parse_string(p, &k, "a metadata key"))
			return -1;
		if (!eat(p, ':')) {
			free(k);
			return psyn(p, "':'");
		}
		if (!peek(p, '"')) {
			char q[80];
			perr(p, "\"__metadata__\": the value of %s must be a string (header byte %zu)",
			     st_quote(k, q, sizeof q, 40), p->i);
			free(k);
			return -1;
		}
		if (parse_string(p, &v, "a metadata value")) {
			free(k);
			return -1;
		}
		if (h->nmeta == cap) {
			size_t nc = cap ? cap * 2 : 8;
			void *nm = realloc(h->meta, nc * sizeof *h->meta);
			if (!nm) {
				free(k);
				free(v);
				return perr(p, "out of memory");
			}
			h->meta = nm;
			cap = nc;
		}
		h->meta[h->nmeta].key = k;
		h->meta[h->nmeta].value = v;
		h->nmeta++;
		if (eat(p, '}'))
			return 0;
		if (!eat(p, ','))
			return psyn(p, "',' or '}'");
	}
}

static int cmp_name(const void *a, const void *b)
{
	const struct st_tensor *x = *(const struct st_tensor *const *)a;
	const struct st_tensor *y = *(const struct st_tensor *const *)b;
	return strcmp(x->name, y->name);
}

static int cmp_key(const void *a, const void *b)
{
	const struct st_meta *x = *(const struct st_meta *const *)a;
	const struct st_meta *y = *(const struct st_meta *const *)b;
	return strcmp(x->key, y->key);
}

/* Data order: by begin, then end (so an empty tensor precedes a non-empty one at the same
 * offset), then header order. */
static int cmp_offset(const void *a, const void *b)
{
	const struct st_tensor *x = a, *y = b;
	if (x->begin != y->begin)
		return x->begin < y->begin ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return x->order < y->order ? -1 : x->order > y->order;
}

static int check_tensor(struct parser *p, const struct st_tensor *t, uint64_t data_len)
{
	char ctx[200];
	tctx(t->name, ctx, sizeof ctx);
	uint64_t n = ckpt_dtype_size(t->dtype);
	for (unsigned d = 0; d < t->ndim; d++)
		if (__builtin_mul_overflow(n, t->shape[d], &n))
			return perr(p, "%s: shape is too large (more than 2^64 bytes)", ctx);
	if (t->begin > t->end)
		return perr(p, "%s: data_offsets [%llu, %llu]: begin is after end", ctx,
			    (unsigned long long)t->begin, (unsigned long long)t->end);
	if (t->end > data_len)
		return perr(p, "%s: data_offsets [%llu, %llu] out of range: the data is %llu bytes%s",
			    ctx, (unsigned long long)t->begin, (unsigned long long)t->end,
			    (unsigned long long)data_len, t->begin < data_len ? " (truncated file?)" : "");
	if (t->end - t->begin != n) {
		char shape[200];
		size_t k = 0;
		shape[k++] = '[';
		for (unsigned d = 0; d < t->ndim && k < sizeof shape - 30; d++)
			k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%llu", d ? ", " : "",
					      (unsigned long long)t->shape[d]);
		snprintf(shape + k, sizeof shape - k, "]");
		return perr(p, "%s: data_offsets [%llu, %llu] span %llu bytes but %s %s needs %llu",
			    ctx, (unsigned long long)t->begin, (unsigned long long)t->end,
			    (unsigned long long)(t->end - t->begin), ckpt_dtype_name(t->dtype), shape,
			    (unsigned long long)n);
	}
	return 0;
}

static int validate(struct parser *p, struct st_header *h, uint64_t data_len)
{
	char q1[160], q2[160];
	for (size_t k = 0; k < h->ntensors; k++)
		if (check_tensor(p, &h->tensors[k], data_len))
			return -1;
	size_t nidx = h->ntensors > h->nmeta ? h->ntensors : h->nmeta;
	void **idx = malloc((nidx ? nidx : 1) * sizeof *idx);
	if (!idx)
		return perr(p, "out of memory");
	for (size_t k = 0; k < h->ntensors; k++)
		idx[k] = &h->tensors[k];
	qsort(idx, h->ntensors, sizeof *idx, cmp_name);
	for (size_t k = 1; k < h->ntensors; k++) {
		const struct st_tensor *t = idx[k];
		if (!strcmp(t->name, ((const struct st_tensor *)idx[k - 1])->name)) {
			free(idx);
			return perr(p, "duplicate tensor name %s", st_quote(t->name, q1, sizeof q1, 100));
		}
	}
	for (size_t k = 0; k < h->nmeta; k++)
		idx[k] = &h->meta[k];
	qsort(idx, h->nmeta, sizeof *idx, cmp_key);
	for (size_t k = 1; k < h->nmeta; k++) {
		const struct st_meta *m = idx[k];
		if (!strcmp(m->key, ((const struct st_meta *)idx[k - 1])->key)) {
			free(idx);
			return perr(p, "\"__metadata__\": duplicate key %s",
				    st_quote(m->key, q1, sizeof q1, 100));
		}
	}
	free(idx);

	if (h->ntensors > 1) /* a file without tensors has h->tensors NULL: qsort(NULL, 0) is UB */
		qsort(h->tensors, h->ntensors, sizeof *h->tensors, cmp_offset);
	uint64_t at = 0;
	const struct st_tensor *prev = NULL;
	for (size_t k = 0; k < h->ntensors; k++) {
		const struct st_tensor *t = &h->tensors[k];
		if (t->begin < at)
			return perr(p, "tensors %s [%llu, %llu] and %s [%llu, %llu] overlap",
				    st_quote(prev->name, q1, sizeof q1, 100),
				    (unsigned long long)prev->begin, (unsigned long long)prev->end,
				    st_quote(t->name, q2, sizeof q2, 100), (unsigned long long)t->begin,
				    (unsigned long long)t->end);
		if (t->begin > at)
			return perr(p, "data bytes [%llu, %llu) belong to no tensor (holes are not "
				    "allowed)", (unsigned long long)at, (unsigned long long)t->begin);
		if (t->end > t->begin) {
			at = t->end;
			prev = t;
		}
	}
	if (at != data_len)
		return perr(p, "%llu bytes after the end of the last tensor (offset %llu; the data "
			    "is %llu bytes)", (unsigned long long)(data_len - at),
			    (unsigned long long)at, (unsigned long long)data_len);
	return 0;
}

int st_parse_header(const char *json, size_t len, uint64_t data_len, struct st_header *out,
		    char *err, size_t errlen)
{
	struct parser p = {.s = json, .n = len, .i = 0, .err = err, .errlen = errlen};
	size_t cap = 0;
	bool have_meta = false;
	memset(out, 0, sizeof *out);
	if (len == 0 || json[0] != '{') {
		psyn(&p, "'{' (the header must begin with a JSON object)");
		goto fail;
	}
	p.i = 1;
	if (!eat(&p, '}')) {
		for (;;) {
			char *name;
			if (parse_string(&p, &name, "a tensor name"))
				goto fail;
			if (!eat(&p, ':')) {
				free(name);
				psyn(&p, "':'");
				goto fail;
			}
			if (!strcmp(name, "__metadata__")) {
				free(name);
				if (have_meta) {
					perr(&p, "duplicate \"__metadata__\"");
					goto fail;
				}
				have_meta = true;
				if (parse_meta(&p, out))
					goto fail;
			} else {
				struct st_tensor t;
				if (parse_tensor(&p, name, &t)) {
					free(name);
					goto fail;
				}
				t.order = out->ntensors;
				if (add_tensor(out, &cap, &t)) {
					free(name);
					perr(&p, "out of memory");
					goto fail;
				}
			}
			if (eat(&p, '}'))
				break;
			if (!eat(&p, ',')) {
				psyn(&p, "',' or '}'");
				goto fail;
			}
		}
	}
	for (; p.i < p.n; p.i++)
		if (p.s[p.i] != ' ') {
			psyn(&p, "only space padding after the header's JSON object");
			goto fail;
		}
	if (validate(&p, out, data_len))
		goto fail;
	return 0;
fail:
	st_header_free(out);
	return -1;
}

void st_header_free(struct st_header *h)
{
	for (size_t k = 0; k < h->ntensors; k++)
		free(h->tensors[k].name);
	for (size_t k = 0; k < h->nmeta; k++) {
		free(h->meta[k].key);
		free(h->meta[k].value);
	}
	free(h->tensors);
	free(h->meta);
	memset(h, 0, sizeof *h);
}

int st_open(const char *path, struct st_file *f, char *err, size_t errlen)
{
	char msg[1024];
	struct stat st;
	memset(f, 0, sizeof *f);
	f->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (f->fd < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(f->fd, &st)) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s: not a regular file", path);
		goto fail;
	}
	f->size = (uint64_t)st.st_size;
	if (f->size < 8) {
		snprintf(err, errlen, "%s: not a safetensors file: %llu bytes, shorter than the "
			 "8-byte header length", path, (unsigned long long)f->size);
		goto fail;
	}
	f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, f->fd, 0);
	if (f->map == MAP_FAILED) {
		f->map = NULL;
		snprintf(err, errlen, "%s: mmap: %s", path, strerror(errno));
		goto fail;
	}
	/* One pass over the data, start to end. */
	madvise((void *)f->map, f->size, MADV_SEQUENTIAL);
	uint64_t n = 0;
	for (int k = 7; k >= 0; k--)
		n = (n << 8) | f->map[k];
	f->header_len = n;
	if (n > f->size - 8) {
		snprintf(err, errlen, "%s: truncated or not a safetensors file: header length %llu "
			 "exceeds the %llu bytes after it", path, (unsigned long long)n,
			 (unsigned long long)(f->size - 8));
		goto fail;
	}
	if (n > ST_MAX_HEADER) {
		snprintf(err, errlen, "%s: header length %llu exceeds the limit of %u bytes", path,
			 (unsigned long long)n, ST_MAX_HEADER);
		goto fail;
	}
	f->data = f->map + 8 + n;
	f->data_len = f->size - 8 - n;
	if (st_parse_header((const char *)f->map + 8, (size_t)n, f->data_len, &f->h, msg,
			    sizeof msg)) {
		snprintf(err, errlen, "%s: %s", path, msg);
		goto fail;
	}
	return 0;
fail:
	st_close(f);
	return -1;
}

void st_close(struct st_file *f)
{
	st_header_free(&f->h);
	if (f->map)
		munmap((void *)f->map, f->size);
	if (f->fd >= 0)
		close(f->fd);
	f->map = NULL;
	f->fd = -1;
}

/* ------------------------------------------------------------------------------------------
 * Writer
 * ---------------------------------------------------------------------------------------- */
struct sbuf {
	char *p;
	size_t len, cap;
	bool oom;
};

static void sb_grow(struct sbuf *b, size_t more)
{
	if (b->oom || b->len + more <= b->cap)
		return;
	size_t nc = b->cap ? b->cap : 256;
	while (nc < b->len + more)
		nc *= 2;
	char *np = realloc(b->p, nc);
	if (!np) {
		b->oom = true;
		return;
	}
	b->p = np;
	b->cap = nc;
}

static void sb_put(struct sbuf *b, const char *s, size_t n)
{
	sb_grow(b, n);
	if (b->oom)
		return;
	memcpy(b->p + b->len, s, n);
	b->len += n;
}

static void sb_puts(struct sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_u64(struct sbuf *b, uint64_t v)
{
	char t[24];
	int n = snprintf(t, sizeof t, "%llu", (unsigned long long)v);
	sb_put(b, t, (size_t)n);
}

/* A JSON string as serde_json and Python's json (ensure_ascii=False) write it: only '"', '\\' and
 * control characters escaped, short escapes where they exist, else \u00xx in lower case. */
static void sb_jstr(struct sbuf *b, const char *s)
{
	sb_put(b, "\"", 1);
	for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
		char e[8];
		switch (*c) {
		case '"': sb_put(b, "\\\"", 2); break;
		case '\\': sb_put(b, "\\\\", 2); break;
		case '\b': sb_put(b, "\\b", 2); break;
		case '\f': sb_put(b, "\\f", 2); break;
		case '\n': sb_put(b, "\\n", 2); break;
		case '\r': sb_put(b, "\\r", 2); break;
		case '\t': sb_put(b, "\\t", 2); break;
		default:
			if (*c < 0x20) {
				snprintf(e, sizeof e, "\\u%04x", *c);
				sb_put(b, e, 6);
			} else
				sb_put(b, (const char *)c, 1);
		}
	}
	sb_put(b, "\"", 1);
}

uint8_t *st_build_header(const struct st_out_tensor *t, size_t nt, const char *const *keys,
			 const char *const *values, size_t nmeta, size_t *len)
{
	struct sbuf b = {0};
	sb_put(&b, "\0\0\0\0\0\0\0\0", 8);
	sb_put(&b, "{", 1);
	bool first = true;
	if (nmeta) {
		sb_puts(&b, "\"__metadata__\":{");
		for (size_t k = 0; k < nmeta; k++) {
			if (k)
				sb_put(&b, ",", 1);
			sb_jstr(&b, keys[k]);
			sb_put(&b, ":", 1);
			sb_jstr(&b, values[k]);
		}
		sb_put(&b, "}", 1);
		first = false;
	}
	uint64_t off = 0;
	for (size_t k = 0; k < nt; k++) {
		const char *dn = ckpt_dtype_name(t[k].dtype);
		if (!dn) {
			free(b.p);
			return NULL;
		}
		if (!first)
			sb_put(&b, ",", 1);
		first = false;
		sb_jstr(&b, t[k].name);
		sb_puts(&b, ":{\"dtype\":\"");
		sb_puts(&b, dn);
		sb_puts(&b, "\",\"shape\":[");
		for (unsigned d = 0; d < t[k].ndim; d++) {
			if (d)
				sb_put(&b, ",", 1);
			sb_u64(&b, t[k].shape[d]);
		}
		sb_puts(&b, "],\"data_offsets\":[");
		sb_u64(&b, off);
		sb_put(&b, ",", 1);
		off += t[k].nbytes;
		sb_u64(&b, off);
		sb_puts(&b, "]}");
	}
	sb_put(&b, "}", 1);
	while ((b.len - 8) % 8)
		sb_put(&b, " ", 1);
	if (b.oom) {
		free(b.p);
		return NULL;
	}
	uint64_t n = b.len - 8;
	for (int k = 0; k < 8; k++)
		b.p[k] = (char)(n >> (8 * k));
	*len = b.len;
	return (uint8_t *)b.p;
}

const char *st_quote(const char *s, char *buf, size_t len, size_t max)
{
	size_t k = 0, i = 0, slen = strlen(s);
	if (len < 16) {
		if (len)
			buf[0] = 0;
		return buf;
	}
	buf[k++] = '"';
	while (i < slen) {
		unsigned char c = (unsigned char)s[i];
		size_t l = c < 0x80 ? 1 : utf8_len((const unsigned char *)s + i, slen - i);
		char e[8];
		const char *piece = s + i;
		size_t plen = l;
		if (!l) { /* not UTF-8: show the byte */
			snprintf(e, sizeof e, "\\x%02x", c);
			piece = e;
			plen = 4;
			l = 1;
		} else if (c < 0x20 || c == 0x7f || c == '"' || c == '\\') {
			switch (c) {
			case '"': snprintf(e, sizeof e, "\\\""); break;
			case '\\': snprintf(e, sizeof e, "\\\\"); break;
			case '\n': snprintf(e, sizeof e, "\\n"); break;
			case '\t': snprintf(e, sizeof e, "\\t"); break;
			case '\r': snprintf(e, sizeof e, "\\r"); break;
			default: snprintf(e, sizeof e, "\\x%02x", c);
			}
			piece = e;
			plen = strlen(e);
		}
		if (i + l > max || k + plen + 5 > len) {
			memcpy(buf + k, "...", 3);
			k += 3;
			break;
		}
		memcpy(buf + k, piece, plen);
		k += plen;
		i += l;
	}
	buf[k++] = '"';
	buf[k] = 0;
	return buf;
}
