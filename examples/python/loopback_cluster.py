"""The cluster scripts/cluster runs, as its command sees it: the members' and proxies' URLs from the
environment, each member's PID from its file (scripts/cluster starts a member again when it dies,
with a new PID), and what failing the leader over takes: find it, SIGKILL it, wait for another
member to lead and for the killed one to come back as a standby."""

import json
import os
import re
import signal
import ssl
import time
import urllib.error
import urllib.request


def _get(url, timeout=2.0):
    """(status, body) of GET url; (0, why) when nothing answered. An https:// member is checked
    against $HF3FS_META_CA_FILE (scripts/cluster --tls) when it is set."""
    context = ssl.create_default_context(cafile=os.environ.get("HF3FS_META_CA_FILE") or None)
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return 0, str(e)


def metrics(url):
    """Every sample of url's /metrics (Prometheus text): {name with its labels, as written: value}."""
    status, text = _get(f"{url}/metrics", timeout=10.0)
    if status != 200:
        raise RuntimeError(f"{url}/metrics: {status} {text}")
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^([^#\n].*) (\S+)$", text, re.MULTILINE)}


def metric(url, name):
    """One sample's value from url's /metrics (name with its labels, as written); None when absent."""
    return metrics(url).get(name)


class LoopbackCluster:
    def __init__(self, members, proxies, models, directory):
        self.members, self.proxies, self.models, self.dir = members, proxies, models, directory

    @classmethod
    def from_env(cls):
        try:
            return cls(os.environ["HF3FS_META_MEMBERS"].split(","), os.environ["HF3FS_META_PROXIES"].split(","),
                       os.environ["HF3FS_META_MODELS"].split(","), os.environ["HF3FS_META_CLUSTER_DIR"])
        except KeyError as e:
            raise SystemExit(f"no {e.args[0]} in the environment: run this under scripts/cluster -- ...")

    def pid(self, i):
        with open(os.path.join(self.dir, f"member-{i}", "pid")) as f:
            return int(f.read())

    def health(self, i):
        """Member i's /healthz as a dict ({} when it does not answer)."""
        status, body = _get(f"{self.members[i]}/healthz")
        try:
            return json.loads(body) if status else {}
        except ValueError:
            return {}

    def leader(self):
        """The index of the member that says it leads, None when none does."""
        leading = [i for i in range(len(self.members)) if self.health(i).get("role") == "leader"]
        return leading[0] if len(leading) == 1 else None

    def wait_for(self, what, condition, timeout):
        """condition()'s first value that is not None within timeout seconds, polled every 50 ms;
        else raises TimeoutError naming `what` and saying what each member's /healthz says."""
        deadline = time.monotonic() + timeout
        while True:
            value = condition()
            if value is not None:
                return value
            if time.monotonic() > deadline:
                said = "; ".join(f"member {i}: {self.health(i) or 'no answer'}" for i in range(len(self.members)))
                raise TimeoutError(f"{what}: not within {timeout} s ({said})")
            time.sleep(0.05)

    def fail_over(self, timeout=30.0):
        """SIGKILLs the leader; returns once a new leader answers (another member, or the killed one
        started again by scripts/cluster, which may win the election too) and the killed member is
        back. What happened, as a dict: killed (index), pid, new_pid (the killed member's, started
        again), leader (the new leader's index), failover_s (kill to new leader), back_s (kill to
        the killed member back in the cluster)."""
        killed = self.wait_for("a leader", self.leader, timeout)
        pid = self.pid(killed)
        began = time.monotonic()
        os.kill(pid, signal.SIGKILL)

        def restarted_pid():
            try:
                new_pid = self.pid(killed)
            except (OSError, ValueError):  # not there yet, or being written
                return None
            return new_pid if new_pid != pid else None

        def new_leader():
            i = self.leader()
            return i if i is not None and (i != killed or restarted_pid() is not None) else None

        leader = self.wait_for("a new leader", new_leader, timeout)
        failover_s = time.monotonic() - began

        def back():
            new_pid = restarted_pid()
            return new_pid if new_pid and self.health(killed).get("role") in ("standby", "leader") else None

        new_pid = self.wait_for(f"member {killed} back", back, timeout)
        return {"killed": killed, "pid": pid, "new_pid": new_pid, "leader": leader, "failover_s": failover_s,
                "back_s": time.monotonic() - began}
