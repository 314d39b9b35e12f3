/* lmhash prints, for each key read from standard input (one per line), the
 * index of the server libmemcached places it on, with weighted ketama
 * (MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED). The servers are the arguments, each
 * host:port:weight, in pool order. The ring package's agreement test
 * compiles it against Debian's libmemcached-dev. */
#include <libmemcached/memcached.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
	memcached_st *m = memcached_create(NULL);
	if (m == NULL) {
		return 1;
	}
	if (memcached_behavior_set(m, MEMCACHED_BEHAVIOR_KETAMA_WEIGHTED, 1) != MEMCACHED_SUCCESS) {
		fprintf(stderr, "lmhash: cannot set KETAMA_WEIGHTED\n");
		return 1;
	}
	for (int i = 1; i < argc; i++) {
		char host[256];
		unsigned port, weight;
		if (sscanf(argv[i], "%255[^:]:%u:%u", host, &port, &weight) != 3) {
			fprintf(stderr, "lmhash: bad server %s (want host:port:weight)\n", argv[i]);
			return 2;
		}
		if (memcached_server_add_with_weight(m, host, (in_port_t) port, weight) != MEMCACHED_SUCCESS) {
			fprintf(stderr, "lmhash: cannot add %s\n", argv[i]);
			return 1;
		}
	}
	char line[1024];
	while (fgets(line, sizeof(line), stdin) != NULL) {
		size_t n = strcspn(line, "\n");
		printf("%u\n", memcached_generate_hash(m, line, n));
	}
	memcached_free(m);
	return 0;
}
