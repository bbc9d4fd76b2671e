/* version.h: the llmbench version and the git commit it was built from (generated at
 * build time by cmake/version.cmake). */
#ifndef LB_CORE_VERSION_H
#define LB_CORE_VERSION_H

extern const char *const lb_version_string;
extern const char *const lb_version_commit;

#endif
