# Shared by the benchmark scripts that drive servers with pgbench: a free port, and the CPU
# time of server processes. Source it; it defines functions only.

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# CPU clock ticks of processes PIDS: their own utime+stime+cutime+cstime (waited-for children:
# PostgreSQL's exited backends) and the utime+stime of their live children.
cpu_ticks() {
  python3 - "$@" <<'EOF'
import os, sys
pids = set(sys.argv[1:])
def fields(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()
total = 0
for p in os.listdir("/proc"):
    if not p.isdigit():
        continue
    try:
        f = fields(p)
    except OSError:
        continue
    # After the ")": state ppid ... utime(12) stime(13) cutime(14) cstime(15), 0-based.
    if p in pids:
        total += int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])
    elif f[1] in pids:
        total += int(f[11]) + int(f[12])
print(total)
EOF
}
