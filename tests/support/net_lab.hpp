// NetLab: a private network of network namespaces for partition tests, made with iproute2 (root
// only). A "hub" namespace holds a bridge; each node is a namespace of its own with one veth on it
// and an address 10.77.0.N/24. Nothing touches the host's interfaces: the subnet exists only inside
// the lab's namespaces, and the host has no link into them (the test's own threads join a node with
// InNetns). Its namespaces are named hf3fs-part-<pid>-<n>-..., so that leftovers of a test process
// that died can be told apart and removed (remove_leftovers(), which every NetLab runs first).
//
// cut(a, b) makes the two nodes silent to each other, both ways, and to nobody else: each gets a
// permanent neighbour entry for the other's address with a MAC that no interface has, so their
// frames to each other go nowhere (the bridge floods them, every node drops them), and established
// connections go silent too, as in a real partition (no reset, no refusal: timeouts). It needs no
// qdisc or tc action (netem and gact are often not built into CI kernels). heal(a, b) deletes the
// entries; ARP finds the real MACs again.
//
// The destructor deletes every namespace it made (each veth and the bridge go with them). Start the
// processes of a node through placement(node).prefix and stop them before the lab goes.
#pragma once

#include <cstddef>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "support/child_process.hpp"

namespace hf3fs_meta::testing {

class NetLab {
 public:
  // Why a lab cannot be made here ("" when it can): not root, no `ip`, or `ip netns add` refused.
  static std::string unavailable();

  // `nodes` namespaces on one bridge. Throws std::runtime_error (the failing command and its output)
  // once what it made is removed again.
  explicit NetLab(std::size_t nodes);
  ~NetLab();
  NetLab(const NetLab&) = delete;
  NetLab& operator=(const NetLab&) = delete;

  std::size_t size() const noexcept { return nodes_; }
  std::string ns(std::size_t node) const;       // the namespace's name (for `ip netns exec`)
  std::string address(std::size_t node) const;  // 10.77.0.N
  // Listening on address(node), started through `ip netns exec ns(node)`.
  Placement placement(std::size_t node) const;

  void cut(std::size_t a, std::size_t b);   // silent to each other, both ways
  void heal(std::size_t a, std::size_t b);  // as before the cut
  void heal_all();

  // Deletes the namespaces named by a test process that no longer runs; what it deleted.
  static std::vector<std::string> remove_leftovers();

 private:
  static std::string ip_binary();
  // Runs `ip args...`; throws naming the command and its output when it fails.
  static void ip(std::vector<std::string> args);
  std::string hub() const;
  void remove_all() noexcept;

  std::string prefix_;  // hf3fs-part-<pid>-<n>-
  std::size_t nodes_;
  std::vector<std::string> made_;  // the namespaces made, the hub first
  std::set<std::pair<std::size_t, std::size_t>> cuts_;
};

// The calling thread in node `node`'s network namespace while it lives (sockets it opens are
// there; threads it starts begin there), then back where it was.
class InNetns {
 public:
  InNetns(const NetLab& lab, std::size_t node);
  ~InNetns();
  InNetns(const InNetns&) = delete;
  InNetns& operator=(const InNetns&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace hf3fs_meta::testing
