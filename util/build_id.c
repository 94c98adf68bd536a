/*
 * The running program's build ID (build_id.h), read from its own program headers with
 * dl_iterate_phdr: no file is opened.
 */
#include "util/build_id.h"

#include <elf.h>
#include <errno.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

struct found {
	const unsigned char *id;
	size_t len;
};

/* The first object dl_iterate_phdr shows is the program itself. */
static int in_program(struct dl_phdr_info *info, size_t size, void *ctx)
{
	struct found *f = ctx;

	(void)size;
	for (ElfW(Half) i = 0; i < info->dlpi_phnum && !f->id; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_NOTE)
			continue;
		const unsigned char *p = (const unsigned char *)(info->dlpi_addr + ph->p_vaddr);
		const unsigned char *end = p + ph->p_memsz;
		while (p + sizeof(ElfW(Nhdr)) <= end) {
			const ElfW(Nhdr) *n = (const ElfW(Nhdr) *)p;
			const unsigned char *name = p + sizeof(*n);
			const unsigned char *desc = name + ((n->n_namesz + 3) & ~3u);
			const unsigned char *next = desc + ((n->n_descsz + 3) & ~3u);
			if (next > end)
				break;
			if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 &&
			    memcmp(name, "GNU", 4) == 0 && n->n_descsz > 0) {
				f->id = desc;
				f->len = n->n_descsz;
				break;
			}
			p = next;
		}
	}
	return 1; /* the program only */
}

int util_build_id_hex(char *out, size_t out_len)
{
	struct found f = {0};

	dl_iterate_phdr(in_program, &f);
	if (!f.id)
		return -ENOENT;
	if (out_len < 2 * f.len + 1)
		return -ENOSPC;
	for (size_t i = 0; i < f.len; i++)
		snprintf(out + 2 * i, 3, "%02x", f.id[i]);
	return 0;
}
