"""Records in the formats of the second real-data round (profile `real-formats`): network gear
syslog as Cisco IOS/IOS-XR/NX-OS, ASA, Junos, Arista EOS and Huawei VRP document it, a relay's file
mixing vendors, application logs (HDFS, OpenStack oslo.log, Zookeeper, Kafka's log4j, Python
logging, klog, nginx and Apache error logs, HPC node logs), TS 28.532 `measDataFile` PM files and
VES alarms whose name is not in `specificProblem`.

Each window has one problem (a few lines at its level) among routine lines of a lower level, some
of which hold alarming words ("error" in an informational message); ugly by chance: a cut line,
a relay's prefix, a non-ASCII host name. The truth is the sender, never a peer in the text.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

from worker.messages import Facts, TelemetryRecord
from .common import iso_s
from .formats_3gpp import make_pm_28532, make_ves_alarm

NET_SHAPES = ("ios", "iosxr", "nxos", "asa", "junos", "eos", "huawei", "mixed_net")
APP_SHAPES = ("hdfs", "oslo", "zookeeper", "log4j", "python", "klog", "nginx", "apache", "hpc")
OTHER_SHAPES = ("pm_28532", "ves_pci", "ves_alarm_name")
SHAPES = NET_SHAPES + APP_SHAPES + OTHER_SHAPES
HOSTS = ("edge-rtr-04", "pe-core-11", "agg-sw-7", "fw-dmz-3", "leaf-102", "bng-sud-2", "rtr-köln-1", "ce-são-paulo-2")
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
ZONES = (("UTC", 0), ("CET", 60), ("PST", -480))


def _bsd(when: datetime, year: bool = False) -> str:
    return f"{MONTHS[when.month - 1]} {when.day:>2}{f' {when.year}' if year else ''} {when:%H:%M:%S}"


def _ms(when: datetime) -> str:
    return f"{when.microsecond // 1000:03d}"


def _peer(rng: random.Random) -> str:
    return f"{rng.choice((10, 172, 192))}.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(1, 255)}"


def _start(rng: random.Random) -> datetime:
    return datetime(rng.randint(2019, 2026), rng.randint(1, 12), rng.randint(1, 28), rng.randrange(24),
                    rng.randrange(60), rng.randrange(60), rng.randrange(10**6), tzinfo=timezone.utc)


# (problem lines) -> one line writer per shape: (when, host, seq, rng, is_problem) -> line
def _ios(when, host, seq, rng, problem, zone=("UTC", 0)):
    local = when + timedelta(minutes=zone[1])
    stamp = f"*{_bsd(local)}.{_ms(when)} {zone[0]}"
    if problem:
        body = f"%LINK-3-UPDOWN: Interface GigabitEthernet0/{rng.randrange(4)}/1, changed state to down"
    else:
        body = rng.choice((f"%CCH323-6-CALL_PRESERVED: cch323_h225_receiver: H.225 socket error on call "
                           f"{rng.randrange(9999)} to {_peer(rng)}, call preserved",
                           f"%SYS-5-CONFIG_I: Configured from console by netops on vty0 ({_peer(rng)})",
                           f"%SEC_LOGIN-5-LOGIN_SUCCESS: Login Success [user: netops] [Source: {_peer(rng)}]"))
    return f"<{184 + int(body[body.index('-') + 1])}>{seq}: {host}: {stamp}: {body}"


def _iosxr(when, host, seq, rng, problem):
    stamp = f"{when.year} {_bsd(when)}.{_ms(when)} UTC"
    if problem:
        body = f"ifmgr[215]: %PKT_INFRA-LINK-3-UPDOWN : Interface HundredGigE0/0/0/{rng.randrange(8)}, changed state to Down"
    else:
        body = f"bgp[1052]: %ROUTING-BGP-5-ADJCHANGE : neighbor {_peer(rng)} Up (VRF: default) (AS: 65{rng.randrange(100, 999)})"
    return f"{iso_s(when)} {host} RP/0/RSP0/CPU0:{stamp}: {body}"


def _nxos(when, host, seq, rng, problem):
    if problem:
        body = "%VPC-2-PEER_KEEP_ALIVE_RECV_FAIL: In domain 10, VPC peer keep-alive receive has failed"
    else:
        body = f"%ETHPORT-5-IF_DOWN_LINK_FAILURE: Interface Ethernet1/{rng.randrange(1, 49)} is down (Link failure)"
    return f"{when.year} {_bsd(when)} {host} {body}"


def _asa(when, host, seq, rng, problem):
    if problem:
        body = "%ASA-1-105005: (Primary) Lost Failover communications with mate on interface inside"
    else:
        body = (f"%ASA-4-106023: Deny tcp src outside:{_peer(rng)}/{rng.randrange(1024, 65535)} dst dmz:{_peer(rng)}/22 "
                f"by access-group \"outside_access_in\" [0x0, 0x0]")
    return f"<{160 + int(body[5])}>{_bsd(when, year=True)} {host} : {body}"


def _junos(when, host, seq, rng, problem):
    if problem:
        return (f"<27>{_bsd(when)} {host} chassisd[1510]: CHASSISD_FRU_OFFLINE_NOTICE: Taking FPC {rng.randrange(8)} "
                f"offline: Error")
    return (f"<30>{_bsd(when)} {host} rpd[2201]: RPD_OSPF_NBRUP: OSPF neighbor {_peer(rng)} (realm ospf-v2 "
            f"xe-0/0/{rng.randrange(8)}.0 area 0.0.0.0) state changed from Loading to Full due to LoadDone")


def _eos(when, host, seq, rng, problem):
    if problem:
        return (f"{_bsd(when)} {host} Bgp: %BGP-3-NOTIFICATION: sent to neighbor {_peer(rng)} (VRF default AS 65010) "
                f"4/0 (Hold Timer Expired Error/Unspecified) 0 bytes")
    return f"{_bsd(when)} {host} Ebra: %LINEPROTO-5-UPDOWN: Line protocol on Interface Ethernet{rng.randrange(1, 33)}/1, changed state to up"


def _huawei(when, host, seq, rng, problem):
    local = when + timedelta(hours=8)
    stamp = f"{_bsd(local, year=True)}+08:00"
    if problem:
        body = (f"%%01DEVM/1/hwBoardFail_active(t)[{seq}]:The board partially failed. (EntPhysicalName=LPU "
                f"{rng.randrange(1, 9)}, Reason=The FPGA on the board is abnormal)")
        return f"<185>{stamp} {host} {body}"
    body = (f"%%01SHELL/5/CMDRECORD(s)[{seq}]:Recorded command information. (Task=VT0, Ip={_peer(rng)}, User=netops, "
            f"Command=\"display interface brief\")")
    return f"<189>{stamp} {host} {body}"


# application layouts: (when, rng, problem) -> line; they name no host but HDFS's own address and HPC's node
def _hdfs(when, host, seq, rng, problem):
    stamp = f"{when:%y%m%d %H%M%S} {rng.randrange(10, 300)}"
    block = f"blk_{rng.randrange(-2**62, 2**62)}"
    if problem:
        return f"{stamp} WARN dfs.DataNode$DataXceiver: {host}:50010:Got exception while serving {block} to /{_peer(rng)}:"
    return f"{stamp} INFO dfs.DataNode$PacketResponder: Received block {block} of size 67108864 from /{_peer(rng)}"


def _oslo(when, host, seq, rng, problem):
    stamp = f"{when:%Y-%m-%d %H:%M:%S}.{_ms(when)}"
    ctx = f"[req-{rng.getrandbits(128):032x} - - - - -]"
    if problem:
        return (f"{host}.log.1 {stamp} 2931 ERROR nova.compute.manager {ctx} [instance: {rng.getrandbits(64):016x}] "
                f"Instance failed to spawn: libvirt.libvirtError: internal error: qemu unexpectedly closed the monitor")
    return (f"nova-api.log.1 {stamp} 4120 INFO nova.osapi_compute.wsgi.server {ctx} {_peer(rng)} \"GET /v2/servers/detail "
            f"HTTP/1.1\" status: 200 len: 1893 time: 0.2{rng.randrange(1000, 9999)}")


def _zookeeper(when, host, seq, rng, problem):
    stamp = f"{when:%Y-%m-%d %H:%M:%S},{_ms(when)}"
    if problem:
        return (f"{stamp} - ERROR [LearnerHandler-/{_peer(rng)}:{rng.randrange(30000, 60000)}:LearnerHandler@648] - "
                f"Unexpected exception causing shutdown while sock still open")
    return f"{stamp} - INFO  [QuorumPeer[myid=2]/0:0:0:0:0:0:0:0:2181:FastLeaderElection@852] - Notification time out: 400"


def _log4j(when, host, seq, rng, problem):
    stamp = f"[{when:%Y-%m-%d %H:%M:%S},{_ms(when)}]"
    if problem:
        return (f"{stamp} ERROR [ReplicaManager broker=2] Error processing append operation on partition "
                f"telemetry-raw-{rng.randrange(12)} (kafka.server.ReplicaManager)")
    return (f"{stamp} INFO [Log partition=telemetry-raw-{rng.randrange(12)}, dir=/var/lib/kafka] Rolled new log segment "
            f"at offset {rng.randrange(10**6)} in 3 ms, 0 errors. (kafka.log.Log)")


def _python(when, host, seq, rng, problem):
    stamp = f"{when:%Y-%m-%d %H:%M:%S},{_ms(when)}"
    if problem:
        return f"{stamp} - oss.sync.netconf - ERROR - NETCONF session to gNB-{rng.randrange(1, 999):04d} closed: timeout after 30 s"
    return f"{stamp} - oss.sync.scheduler - INFO - configuration pushed to gNB-{rng.randrange(1, 999):04d} without error"


def _klog(when, host, seq, rng, problem):
    stamp = f"{when:%m%d %H:%M:%S}.{when.microsecond:06d}       1"
    if problem:
        return (f"E{stamp} reflector.go:138] pkg/informers/factory.go:134: Failed to watch *v1.ConfigMap: dial tcp "
                f"10.96.0.1:443: connect: connection refused")
    return f"I{stamp} controller.go:219] \"Reconciling\" cell=\"NRCellDU-{rng.randrange(1, 12)}\""


def _nginx(when, host, seq, rng, problem):
    stamp = f"{when:%Y/%m/%d %H:%M:%S}"
    if problem:
        return (f"{stamp} [error] 2211#2211: *{rng.randrange(10**5)} connect() failed (111: Connection refused) while "
                f"connecting to upstream, client: {_peer(rng)}, server: portal.example.net, upstream: \"http://10.0.3.14:8080/\"")
    return f"{stamp} [notice] 2209#2209: signal process started"


def _apache(when, host, seq, rng, problem):
    stamp = f"[{when:%a %b %d %H:%M:%S}.{when.microsecond:06d} {when.year}]"
    if problem:
        return (f"{stamp} [proxy:error] [pid {rng.randrange(1000, 9999)}:tid 140300] (111)Connection refused: AH00957: "
                f"http: attempt to connect to 10.0.3.15:8080 (app-backend) failed")
    return f"{stamp} [mpm_event:notice] [pid 1401:tid 140233] AH00489: Apache/2.4.62 (Unix) configured -- resuming normal operations"


def _hpc(when, host, seq, rng, problem):
    epoch = int(when.timestamp())
    if problem:
        return (f"{seq} {host} unix.hw state_change.unavailable {epoch} 1 Component State Change: Component "
                f"\\042alt0\\042 is in the unavailable state (HWID={rng.randrange(1000, 9999)})")
    other = f"node-{rng.randrange(1, 99)}"
    return f"{seq} {other} boot_cmd new {epoch} 1 Targeting domains:node-D5 and nodes:{other} child of command {seq}"


# shape -> (writer, truth severity, keywords, record kind, attributes the collector adds, needs a timestamp)
WRITERS = {
    "ios": (_ios, "major", ["gigabitethernet", "down"], "syslog", False, True),
    "iosxr": (_iosxr, "major", ["hundredgige", "down"], "syslog", False, False),
    "nxos": (_nxos, "critical", ["keep-alive"], "syslog", False, False),
    "asa": (_asa, "critical", ["failover"], "syslog", False, False),
    "junos": (_junos, "major", ["fpc", "offline"], "syslog", False, True),
    "eos": (_eos, "major", ["hold timer"], "syslog", False, True),
    "huawei": (_huawei, "critical", ["board"], "syslog", False, False),
    "hdfs": (_hdfs, "warning", ["exception"], "text", False, False),
    "oslo": (_oslo, "major", ["spawn"], "text", False, False),
    "zookeeper": (_zookeeper, "major", ["exception"], "text", True, False),
    "log4j": (_log4j, "major", ["append"], "text", True, False),
    "python": (_python, "major", ["netconf", "timeout"], "text", True, False),
    "klog": (_klog, "major", ["watch"], "text", True, True),
    "nginx": (_nginx, "major", ["connection refused"], "text", True, False),
    "apache": (_apache, "major", ["connection refused"], "text", True, False),
    "hpc": (_hpc, "major", ["unavailable"], "text", False, False),
}
APP_HOSTS = ("app-node-3", "svc-east-12", "ctrl-plane-2", "dn-rack4-07", "zk-ensemble-1")


def _host(shape: str, rng: random.Random) -> str:
    if shape == "hdfs":
        return f"10.250.{rng.randrange(256)}.{rng.randrange(1, 255)}"  # the DataNode's own address
    if shape == "oslo":
        return rng.choice(("nova-compute", "cinder-volume", "neutron-l3-agent"))
    if shape == "hpc":
        return f"node-{rng.randrange(100, 300)}"
    if shape in NET_SHAPES:
        return rng.choice(HOSTS)
    return rng.choice(APP_HOSTS)


def _log_window(index: int, shape: str, lines: int, rng: random.Random) -> tuple[TelemetryRecord, Facts]:
    writer, severity, keywords, kind, host_attribute, needs_timestamp = WRITERS[shape]
    host = _host(shape, rng)
    when = _start(rng)
    zone = rng.choice(ZONES)
    problems = set(rng.sample(range(lines), max(2, lines // 6)))
    body, times = [], []
    for i in range(lines):
        extra = {"zone": zone} if shape == "ios" else {}
        body.append(writer(when, host, 1000 + i, rng, i in problems, **extra))
        times.append(when)
        when += timedelta(seconds=rng.randrange(1, 40), microseconds=rng.randrange(10**6))
    if rng.random() < 0.3 and len(body) > 4:  # a line cut short
        at = rng.choice([i for i in range(1, len(body) - 1) if i not in problems] or [1])
        body[at] = body[at][: len(body[at]) // 3]
    attributes = {"format": shape, "shape": "real-formats"}
    if host_attribute:
        attributes["host"] = host
    timestamp = iso_s(times[-1]) if needs_timestamp or index % 2 else None
    record = TelemetryRecord(id=f"real-{shape}-{index:06d}", kind=kind, body="\n".join(body), timestamp=timestamp,
                             attributes=attributes)
    truth = Facts(entity=host, severity=severity, problem=" ".join(keywords), first_seen=iso_s(min(times)),
                  last_seen=None, event_count=None,
                  details={"problemKeywords": ", ".join(keywords), "shape": shape})
    return record, truth


def _mixed_net(index: int, lines: int, rng: random.Random) -> tuple[TelemetryRecord, Facts]:
    """A relay's file: many routine lines from a switch, a few errors from a router, one critical
    line from a third device (the element: worst severity first, then most lines)."""
    switch, router, worst = rng.sample(HOSTS, 3)
    when = _start(rng)
    body, first = [], when
    critical_at = rng.randrange(lines)
    for i in range(lines):
        if i == critical_at:
            body.append(f"{iso_s(when)} {worst} " + _huawei(when, worst, i, rng, True).split(f"{worst} ", 1)[1])
        elif i % 5 == 1:
            body.append(f"{iso_s(when)} {router} rpd[2201]: BGP_IO_ERROR_CLOSE_SESSION: BGP peer {_peer(rng)}: Error "
                        f"event Operation timed out(60) for I/O session - closing it")
        else:
            body.append(f"{iso_s(when)} {switch} {1800 + i}: *{_bsd(when)}.{_ms(when)} UTC: %LINEPROTO-5-UPDOWN: Line "
                        f"protocol on Interface GigabitEthernet1/0/{rng.randrange(1, 48)}, changed state to up")
        when += timedelta(seconds=rng.randrange(1, 20))
    record = TelemetryRecord(id=f"real-mixed_net-{index:06d}", kind="syslog", body="\n".join(body),
                             attributes={"format": "mixed_net", "shape": "real-formats"})
    truth = Facts(entity=worst, severity="critical", problem="board failed", first_seen=iso_s(first),
                  details={"problemKeywords": "board", "shape": "mixed_net"})
    return record, truth


def make(index: int, lines: int, rng: random.Random) -> tuple[TelemetryRecord, Facts]:
    """Record `index` of the `real-formats` profile: `SHAPES[index % len(SHAPES)]`, about `lines` lines."""
    shape = SHAPES[index % len(SHAPES)]
    if shape == "mixed_net":
        return _mixed_net(index, max(lines, 6), rng)
    if shape == "pm_28532":
        return make_pm_28532(index, _start(rng).replace(second=0, microsecond=0), rng)
    if shape in ("ves_pci", "ves_alarm_name"):
        return make_ves_alarm(index, shape, _start(rng).replace(microsecond=0), rng)
    return _log_window(index, shape, max(lines, 6), rng)
