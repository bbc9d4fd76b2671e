/* facts.h: what decides whether NCCL works on a node, as JSON: the driver and CUDA
 * versions, NCCL's version, each GPU (model, memory, uncorrected ECC errors, clock event
 * reasons, clocks, PCIe generation and width, active NVLinks and their far ends), network
 * interfaces (state, MTU, speed, addresses), InfiniBand/RoCE ports (state, rate, link layer,
 * GID table with each entry's type), the NCCL_* variables set, and those settings that
 * cannot work here (an NCCL_SOCKET_IFNAME or NCCL_IB_HCA that names nothing present).
 *
 * The /sys readers take a root so tests read fixture trees; nothing here fails: a value
 * that cannot be read is absent. */
#ifndef LB_DOCTOR_FACTS_H
#define LB_DOCTOR_FACTS_H

#include <jansson.h>

/* /sys/class/net under root: [{name, operstate, mtu, speed_mbps, mac, loopback}]. */
json_t *lb_doctor_read_net(const char *root);
/* /sys/class/infiniband under root: [{device, port, state, rate, link_layer,
 * gids: [{index, gid, type, ndev}]}], unused (all-zero) GIDs left out. */
json_t *lb_doctor_read_ib(const char *root);
/* Adds "addresses": [..] to each interface from getifaddrs. */
void lb_doctor_add_addresses(json_t *net);
/* The GID index NCCL_IB_GID_INDEX should name on a RoCE port: the first RoCE v2 entry with
 * an IPv4-mapped address, else the first RoCE v2 entry; -1 when the port has none. */
int lb_doctor_gid_index(const json_t *port);
/* Sentences about NCCL_SOCKET_IFNAME and NCCL_IB_HCA values (either may be NULL) that name
 * no interface or device in net / ib, following NCCL's syntax: comma-separated prefixes,
 * '=' for exact names, '^' for a list to exclude. */
json_t *lb_doctor_env_problems(const json_t *net, const json_t *ib, const char *socket_ifname,
                               const char *ib_hca);
/* This node's facts (the object described above; the caller owns it). */
json_t *lb_doctor_node_facts(void);
/* Sentences naming each rank whose facts differ from the reference rank's: driver, CUDA,
 * NCCL and GPU models against the first rank with a GPU (CUDA's or NVML's), among ranks with
 * one. Each rank without a GPU is named once as such when another has one. An empty array
 * when all agree (or none has a GPU). */
json_t *lb_doctor_compare(json_t *const *facts, int n);

#endif
