// Reaching the host over the network or through sockets:
//   net_probe unix PATH        connect to a path socket (stream)
//   net_probe abstract NAME    connect to an abstract socket "\0NAME"
//   net_probe tcp ADDR PORT    connect (IPv4 or IPv6 literal), 1 s timeout
//   net_probe udp ADDR PORT    send a datagram (success only means it left; the host checks)
//   net_probe loopback         a server on the sandbox's own 127.0.0.1 must work ("ok ...")
//   net_probe interfaces       prints "interface NAME" for every interface
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "report.h"

static void ConnectUnix(const char* what, const char* name, int abstract) {
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  size_t len = strlen(name);
  if (len + 2 > sizeof(addr.sun_path)) exit(2);
  memcpy(addr.sun_path + (abstract ? 1 : 0), name, len);
  socklen_t size = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (abstract ? 1 : 0));
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) {
    Broken("socket(AF_UNIX)", errno);
    return;
  }
  if (connect(fd, (struct sockaddr*)&addr, size) == 0) {
    (void)!write(fd, "moat-e2e-hello\n", 15);
    Escaped(what, "connected to %s%s", abstract ? "@" : "", name);
  } else {
    Blocked(what, errno);
  }
  close(fd);
}

static socklen_t ParseInet(const char* host, const char* port, struct sockaddr_storage* ss) {
  memset(ss, 0, sizeof(*ss));
  struct sockaddr_in* in4 = (struct sockaddr_in*)ss;
  struct sockaddr_in6* in6 = (struct sockaddr_in6*)ss;
  if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
    in4->sin_family = AF_INET;
    in4->sin_port = htons((uint16_t)atoi(port));
    return sizeof(*in4);
  }
  if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons((uint16_t)atoi(port));
    return sizeof(*in6);
  }
  fprintf(stderr, "net_probe: bad address \"%s\"\n", host);
  exit(2);
}

static void ConnectTcp(const char* host, const char* port) {
  struct sockaddr_storage ss;
  socklen_t len = ParseInet(host, port, &ss);
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    Broken("socket(tcp)", errno);
    return;
  }
  int rc = connect(fd, (struct sockaddr*)&ss, len);
  int err = errno;
  if (rc != 0 && err == EINPROGRESS) {
    struct pollfd p = {fd, POLLOUT, 0};
    if (poll(&p, 1, 1000) == 1) {
      socklen_t sl = sizeof(err);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl);
      rc = err == 0 ? 0 : -1;
    } else {
      err = ETIMEDOUT;
    }
  }
  if (rc == 0) {
    Escaped("tcp", "connected to %s port %s", host, port);
  } else {
    Blocked("tcp", err);
  }
  close(fd);
}

static void SendUdp(const char* host, const char* port) {
  struct sockaddr_storage ss;
  socklen_t len = ParseInet(host, port, &ss);
  int fd = socket(ss.ss_family, SOCK_DGRAM, 0);
  if (fd < 0) {
    Broken("socket(udp)", errno);
    return;
  }
  // Reaching the host would show on the host's socket; here only whether it left.
  if (sendto(fd, "moat-e2e-udp", 12, 0, (struct sockaddr*)&ss, len) < 0) {
    Blocked("udp", errno);
  } else {
    printf("sent udp (into the sandbox's own network namespace)\n");
  }
  close(fd);
}

static void Loopback(void) {
  int server = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (server < 0 || bind(server, (struct sockaddr*)&addr, len) != 0 || listen(server, 1) != 0 ||
      getsockname(server, (struct sockaddr*)&addr, &len) != 0) {
    Broken("loopback server", errno);
    return;
  }
  int client = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(client, (struct sockaddr*)&addr, len) != 0) {
    Broken("loopback connect", errno);
    return;
  }
  int conn = accept(server, NULL, NULL);
  char buf[8] = {0};
  if (conn < 0 || write(client, "ping", 4) != 4 || read(conn, buf, 4) != 4 ||
      strcmp(buf, "ping") != 0) {
    Broken("loopback exchange", errno);
    return;
  }
  Ok("loopback server");
}

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "unix") == 0) {
    ConnectUnix("unix", argv[2], 0);
  } else if (argc == 3 && strcmp(argv[1], "abstract") == 0) {
    ConnectUnix("abstract", argv[2], 1);
  } else if (argc == 4 && strcmp(argv[1], "tcp") == 0) {
    ConnectTcp(argv[2], argv[3]);
  } else if (argc == 4 && strcmp(argv[1], "udp") == 0) {
    SendUdp(argv[2], argv[3]);
  } else if (argc == 2 && strcmp(argv[1], "loopback") == 0) {
    Loopback();
  } else if (argc == 2 && strcmp(argv[1], "interfaces") == 0) {
    struct if_nameindex* ifs = if_nameindex();
    for (struct if_nameindex* i = ifs; i && i->if_index != 0; ++i) {
      printf("interface %s\n", i->if_name);
    }
    if (ifs) if_freenameindex(ifs);
  } else {
    fprintf(stderr, "usage: net_probe unix|abstract|tcp|udp|loopback|interfaces ...\n");
    return 2;
  }
  return Finish();
}
