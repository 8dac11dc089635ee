# Sourced by slurm-dev-cluster.sh (22.05) and slurm24-dev-cluster.sh (24.11): the dev cluster's
# slurm.conf and gres.conf, the same for both but for the names and ports. Typed GPUs (gres.conf
# `Type=`: a100 on n1 and n2, v100 on n3) and node features (ib on n1 and n2, nvme on n1), so
# tests can ask for `--gres=gpu:a100:N` and `--constraint`; untyped `--gres=gpu:N` runs on any.
#
#   write_dev_conf DIR CLUSTER CTLD_PORT SLURMD_PORT_1 ACCT_LINES [PRIORITY_LINES [CPUS]]
#
# DIR: the state directory (the files go there); SLURMD_PORT_1: n1's port (n2, n3: the next two);
# ACCT_LINES: the accounting settings, one per line; PRIORITY_LINES: the priority plugin and its
# settings (default `PriorityType=priority/basic`); CPUS: each node's CPUs (default 2; more than
# the machine has needs `SlurmdParameters=config_overrides` among PRIORITY_LINES).
write_dev_conf() {
  local D=$1 name=$2 ctld_port=$3 p1=$4 acct_lines=$5 prio_lines=${6:-PriorityType=priority/basic} cpus=${7:-2} H
  H=$(hostname)
  cat >"$D/slurm.conf" <<CONF
ClusterName=$name
SlurmctldHost=localhost
SlurmUser=root
SlurmctldPort=$ctld_port
AuthType=auth/munge
CredType=cred/munge
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$D/jwt.key
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/%n
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd-%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
MailProg=/bin/true
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,sched_interval=2,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
$prio_lines
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=300
MaxJobCount=100000
KillWait=5
Waittime=0
GresTypes=gpu
$acct_lines
JobCompType=jobcomp/filetxt
JobCompLoc=$D/log/jobcomp.txt
NodeName=n1 NodeHostname=$H NodeAddr=127.0.0.1 Port=$p1 CPUs=$cpus RealMemory=4000 Gres=gpu:a100:8 Features=ib,nvme State=UNKNOWN
NodeName=n2 NodeHostname=$H NodeAddr=127.0.0.1 Port=$((p1 + 1)) CPUs=$cpus RealMemory=4000 Gres=gpu:a100:8 Features=ib State=UNKNOWN
NodeName=n3 NodeHostname=$H NodeAddr=127.0.0.1 Port=$((p1 + 2)) CPUs=$cpus RealMemory=4000 Gres=gpu:v100:4 State=UNKNOWN
PartitionName=gpu Nodes=n[1-3] Default=YES MaxTime=INFINITE State=UP
PartitionName=other Nodes=n3 MaxTime=INFINITE State=UP
CONF
  cat >"$D/gres.conf" <<CONF
AutoDetect=off
NodeName=n[1-2] Name=gpu Type=a100 File=$D/fakegpu/nvidia[0-7]
NodeName=n3 Name=gpu Type=v100 File=$D/fakegpu/nvidia[0-3]
CONF
}
