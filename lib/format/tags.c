/* Checkpoint tags (docs/format.md, "Tags"): the rule a tag follows and the reserved metadata entry
 * "ckpt.tags" that holds them, a comma-separated list. Pure: strings in, strings out, no I/O. */
#include <string.h>

#include "common/common.h"
#include "format/format.h"

/* Why tag[0..len) breaks the rule, or NULL when it is a valid tag. */
static const char *tag_fault(const char *tag, size_t len, size_t *at)
{
	if (!len)
		return "is empty";
	if (len > CKPT_TAG_MAX)
		return "is too long";
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)tag[i];
		*at = i + 1;
		if (c == ',')
			return "has a comma";
		if (c <= ' ' || c > '~')
			return "has a space or a character that is not printable ASCII";
	}
	return NULL;
}

int tag_check(const char *tag)
{
	size_t len = strlen(tag), at = 0;
	const char *why = tag_fault(tag, len, &at);
	if (!why)
		return 0;
	if (at)
		return ckpt_fail(CKPT_E_INVAL, "tag '%.40s' %s (character %zu); a tag is 1 to %d "
				 "printable ASCII characters other than space and ','", tag, why, at,
				 CKPT_TAG_MAX);
	return ckpt_fail(CKPT_E_INVAL, "tag '%.40s' %s; a tag is 1 to %d printable ASCII "
			 "characters other than space and ','", tag, why, CKPT_TAG_MAX);
}

/* Whether tag[0..len) is one of the first `upto` bytes of the comma-separated list. */
static bool tags_has(const char *list, size_t upto, const char *tag, size_t len)
{
	for (const char *p = list; p < list + upto;) {
		size_t n = strcspn(p, ",");
		if (n == len && !memcmp(p, tag, len))
			return true;
		p += n + (p[n] == ',');
	}
	return false;
}

/* Whether list is "" or 1 to CKPT_TAGS_MAX distinct valid tags joined by ','. */
static bool tags_valid(const char *list)
{
	size_t count = 0, at;
	for (const char *p = list; *p; count++) {
		size_t n = strcspn(p, ",");
		if (count >= CKPT_TAGS_MAX || tag_fault(p, n, &at) || tags_has(list, p - list, p, n) ||
		    (p[n] == ',' && !p[n + 1]))
			return false;
		p += n + (p[n] == ',');
	}
	return true;
}

size_t tags_count(const char *list)
{
	size_t count = *list != 0;
	for (const char *p = list; *p; p++)
		count += *p == ',';
	return count;
}

int tags_add(const char *list, const char *tag, char *out, size_t cap)
{
	size_t len = strlen(tag), have = strlen(list);
	int rc = tag_check(tag);
	if (rc)
		return rc;
	if (tags_has(list, have, tag, len)) {
		memmove(out, list, have + 1);
		return 0;
	}
	if (tags_count(list) >= CKPT_TAGS_MAX)
		return ckpt_fail(CKPT_E_INVAL, "tag '%s': a checkpoint has at most %d tags", tag,
				 CKPT_TAGS_MAX);
	if (have + 1 + len + 1 > cap)
		return ckpt_fail(CKPT_E_INVAL, "tag '%s': the tags are too long", tag);
	memmove(out, list, have);
	if (have)
		out[have++] = ',';
	memcpy(out + have, tag, len + 1);
	return 0;
}

bool tags_match(const char *list, const char *tag)
{
	return tags_has(list, strlen(list), tag, strlen(tag));
}

const char *manifest_tags(const struct manifest *m)
{
	for (uint32_t i = 0; i < m->n_meta; i++)
		if (!strcmp(m->meta[i].key, CKPT_TAGS_KEY))
			/* a value that breaks the rule was not written by save1_add_tag (a key set
			 * before it was reserved): no tags, and the checkpoint stays readable */
			return tags_valid(m->meta[i].value) ? m->meta[i].value : "";
	return "";
}
