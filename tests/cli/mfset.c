/* mfset MANIFEST KEY VALUE: sets one metadata value of a manifest file, re-encoding it through
 * lib/format (tests/unit/t-mf-rewrite.h) so that its checksum follows and only the value is
 * wrong; the ckptctl tests forge damaged multi-rank metadata with it. KEY must be there.
 * mfset -d MANIFEST KEY: removes KEY (which must be there) the same way. */
#include "t-mf-rewrite.h"

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "-d")) {
		t_mf_del_meta(argv[2], argv[3]);
		return 0;
	}
	if (argc != 4) {
		fprintf(stderr, "usage: mfset MANIFEST KEY VALUE | mfset -d MANIFEST KEY\n");
		return 2;
	}
	t_mf_set_meta(argv[1], argv[2], argv[3]);
	return 0;
}
