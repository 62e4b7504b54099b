// choose_gloo_hostname (kiln/runtime/distributed/ProcessGroup.h): the
// address a rank's Gloo transport binds, after c10d's ProcessGroupGloo
// (createDeviceForInterface / createDefaultDevice) and its
// GLOO_SOCKET_IFNAME.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/runtime/distributed/ProcessGroup.h"

namespace kiln::runtime::distributed {

namespace {

using Kind = DistributedError::Kind;

struct InterfaceAddress {
  std::string interface, address;
};

/// Every IPv4 address of this node's interfaces that are up, in getifaddrs
/// order.
std::vector<InterfaceAddress> ipv4_interfaces() {
  std::vector<InterfaceAddress> out;
  ifaddrs *list = nullptr;
  if (::getifaddrs(&list) != 0)
    return out;
  for (const ifaddrs *i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
      continue;
    char ip[INET_ADDRSTRLEN] = "";
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in *>(i->ifa_addr)->sin_addr, ip, sizeof ip);
    out.push_back({i->ifa_name, ip});
  }
  ::freeifaddrs(list);
  return out;
}

/// "lo 127.0.0.1, eth0 10.0.0.2" (what the fix may name).
std::string describe(const std::vector<InterfaceAddress> &all) {
  std::string text;
  for (const auto &a : all)
    text += (text.empty() ? "" : ", ") + a.interface + " " + a.address;
  return text.empty() ? "none" : text;
}

std::string env_value(const char *name) {
  const char *v = std::getenv(name);
  return v ? v : "";
}

/// GLOO_SOCKET_IFNAME=IFACE: IFACE's first IPv4 address.
std::string address_of_interface(const std::string &name) {
  if (name.find(',') != std::string::npos)
    throw DistributedError(Kind::Invalid, "GLOO_SOCKET_IFNAME='" + name +
                                              "' names several interfaces; Kiln's Gloo group uses one: name one "
                                              "interface the other nodes reach");
  const auto all = ipv4_interfaces();
  for (const auto &a : all)
    if (a.interface == name)
      return a.address;
  throw DistributedError(Kind::Invalid, "GLOO_SOCKET_IFNAME='" + name +
                                            "' is not an interface of this node with an IPv4 address (those are: " +
                                            describe(all) + "); name one the other nodes reach, or unset it");
}

/// KILN_GLOO_HOSTNAME=ADDR: ADDR's IPv4 address, checked to be one of this
/// node's (bind() to it succeeds).
std::string address_of_hostname(const std::string &host) {
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || !res)
    throw DistributedError(Kind::Invalid, "KILN_GLOO_HOSTNAME='" + host + "' does not resolve to an IPv4 address (" +
                                              ::gai_strerror(rc) + "); set it to one of this node's addresses (" +
                                              describe(ipv4_interfaces()) + ") or unset it");
  sockaddr_in a = *reinterpret_cast<const sockaddr_in *>(res->ai_addr);
  ::freeaddrinfo(res);
  a.sin_port = 0;
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const bool bound = fd >= 0 && ::bind(fd, reinterpret_cast<const sockaddr *>(&a), sizeof a) == 0;
  const std::string why = std::strerror(errno);
  if (fd >= 0)
    ::close(fd);
  char ip[INET_ADDRSTRLEN] = "";
  ::inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
  if (!bound)
    throw DistributedError(Kind::Invalid, "KILN_GLOO_HOSTNAME='" + host + "' (" + ip +
                                              ") is not an address of this node (bind: " + why +
                                              "); set it to one of " + describe(ipv4_interfaces()) + " or unset it");
  return ip;
}

} // namespace

std::string choose_gloo_hostname(const std::string &store_local_address, const std::string &socket_ifname,
                                 const std::string &kiln_hostname) {
  if (!socket_ifname.empty() && !kiln_hostname.empty())
    throw DistributedError(Kind::Invalid, "both GLOO_SOCKET_IFNAME='" + socket_ifname + "' and KILN_GLOO_HOSTNAME='" +
                                              kiln_hostname + "' are set; set only one");
  if (!socket_ifname.empty())
    return address_of_interface(socket_ifname);
  if (!kiln_hostname.empty())
    return address_of_hostname(kiln_hostname);
  if (!store_local_address.empty())
    return store_local_address;
  return "127.0.0.1";
}

std::string choose_gloo_hostname(const std::string &store_local_address) {
  return choose_gloo_hostname(store_local_address, env_value("GLOO_SOCKET_IFNAME"), env_value("KILN_GLOO_HOSTNAME"));
}

} // namespace kiln::runtime::distributed
