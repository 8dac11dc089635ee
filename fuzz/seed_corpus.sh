#!/usr/bin/env bash
# Seeds fuzz/corpus/<target>/ from the shared traces ($ORDO_TRACES, default ../shared/traces
# beside the repository) and small inline samples of the formats that have no shared file.
# Usage: fuzz/seed_corpus.sh   then   cargo +nightly fuzz run swf -- -max_total_time=600
set -eu  # (no pipefail: `zcat | head` ends zcat with SIGPIPE)
cd "$(dirname "$0")"
T="${ORDO_TRACES:-$(cd ../.. && pwd)/shared/traces}"
[ -d "$T" ] || { echo "traces not found at $T" >&2; exit 1; }
seed() { # target name < content
  mkdir -p "corpus/$1"; cat > "corpus/$1/$2"
}
for n in 5 40; do
  head -n $n "$T/philly/philly_rfold.csv" | seed philly "rfold-$n"
  head -n $n "$T/philly/philly_vc.csv" | seed philly_vc "vc-$n"
  head -n $n "$T/alibaba/openb_pod_list_default.csv" | seed alibaba "pods-$n"
  head -n $n "$T/tiresias/60_job.csv" | seed tiresias "tiresias-$n"
  head -n $((n + 10)) "$T/swf/lublin_256.swf" | seed swf "lublin-$n"
  zcat "$T/swf/KTH-SP2-1996-2.1-cln.swf.gz" | head -n $((n + 30)) | seed swf "kth-$n"
done
zcat "$T/swf/KTH-SP2-1996-2.1-cln.swf.gz" | head -n 60 | gzip | seed swf kth.gz
sed -n '1,20p' "$T/alibaba/openb_pod_list_default.csv" | sed 's/openb-pod/p/' | seed alibaba pods-short
printf 'job_id,submit_time,num_gpu,duration,user,group,estimate,priority,cpus,mem_mib,gpu_milli,queue\na,0,1,10.5,u,g,20,3,4,100,250,LS\nb,1.25,8,3600,,,,,,,,\n' | seed generic full
printf 'job_id,submit_time,num_gpu,duration\nx,0,2,1\n' | seed generic min
printf 'job_id,submit_time,num_gpu,duration,gpu_model,gpu_mem_mib,features,job_class,measured_on\na,0,4,10,a100|h100,40960,ib&nvme,resnet,v100\nb,1,1,5,,,,,\n' | seed generic typed
printf '{"job_id":"a","submit_time":0,"num_gpu":2,"duration":9,"gpu_model":"v100","features":"ib","job_class":"bert"}\n' | seed jsonl typed
printf '[speeds."*"]\nk80 = 1\nv100 = 3.3\n[speeds.resnet50]\nk80 = 1.0\nv100 = 5.8\n' | seed speeds full
printf 'SwitchName=s0 Nodes=n[0-7]\nSwitchName=s1 Nodes=n[8-15]\nSwitchName=top Switches=s[0-1]\n' | seed topology tree
printf 'BlockName=b0 Nodes=n[0-3]\nBlockName=b1 Nodes=n[4-7]\nBlockSizes=4,8\n' | seed topology block
printf 'levels = ["block", "switch"]\n[units.block]\nb0 = "n[0-3]"\nb1 = "n[4-7]"\n[units.switch]\ns0 = "b[0-1]"\n[slowdown]\nblock = 1.5\n[slowdown.class.lm]\nblock = 4\n' | seed topology toml
printf '{"job_id":"a","submit_time":0,"num_gpu":1,"duration":5,"gpu_milli":300,"queue":"LS"}\n{"job_id":2,"submit_time":1.5,"num_gpu":4,"duration":60,"estimate":120,"user":"u"}\n' | seed jsonl two
printf 'job_id,user,vc,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n1,u1,vcA,8,48,1,COMPLETED,2020-04-01 00:00:07,2020-04-01 00:00:09,2020-04-01 01:00:09,3600,2\n2,u2,vcB,0,4,1,FAILED,1585699807,,,10,0\n' | seed helios two
printf 'instance_sn,role,app_name,cpu_request,cpu_limit,gpu_request,gpu_limit,rdma_request,rdma_limit,memory_request,memory_limit,disk_request,disk_limit,max_instance_per_node,creation_time,scheduled_time,deletion_time\ni0,HN,app_0,12,12,1,1,25,25,120.0,120.0,640.0,800.0,8,,,\ni1,CN,app_1,64,64,0,0,100,100,320.0,320.0,255.0,300.0,2,100.0,100.0,500.0\ni2,HN,app_0,6.5,6.5,0.5,0.5,25,25,60.5,60.5,100.0,100.0,8,120.0,130.5,\n' | seed alibaba_2025 three
printf 'JobID|User|Account|Partition|Submit|Start|End|Elapsed|Timelimit|AllocTRES|ReqTRES|State|Priority\n100|alice|ml|gpu|2024-03-01T10:00:00|2024-03-01T10:05:00|2024-03-02T12:08:04|1-02:03:04|2-00:00:00|billing=8,cpu=8,gres/gpu=2,mem=64G,node=1||COMPLETED|4294\n100.batch|||||||1-02:03:04||cpu=8||COMPLETED|\n101|bob|cv|debug|2024-03-01T11:00:00|||00:10:00|UNLIMITED||cpu=2,mem=4000M,gres/gpu:a100=1|CANCELLED by 1|10\n' | seed sacct three
printf 'JobId=7 UserId=alice(1001) GroupId=users(100) Name=train big JobState=COMPLETED Partition=gpu TimeLimit=120 StartTime=2024-03-01T10:00:10 EndTime=2024-03-01T11:00:10 NodeList=n1 NodeCnt=2 ProcCnt=16 WorkDir=/w ReservationName= Tres=cpu=16,mem=32G,gres/gpu=4 Account=ml QOS=normal WcKey= Cluster=c SubmitTime=2024-03-01T10:00:00 EligibleTime=2024-03-01T10:00:00 DerivedExitCode=0:0 ExitCode=0:0\nJobId=8 UserId=bob(2) StartTime=Unknown EndTime=2024-03-01T10:30:00 TimeLimit=UNLIMITED\n' | seed jobcomp two
# The field's traces: the hand-made fixtures of crates/ordo-trace/tests/data/field (their
# published layouts), and PAI's four tables joined into one input split at 0xff bytes.
F=../crates/ordo-trace/tests/data/field
cat "$F/helios/cluster_log.csv" | seed helios cluster_log
cat "$F/lucid/cluster_full_log.csv" | seed helios lucid_full_log
cat "$F/acme/trace_seren.csv" | seed acme seren
cat "$F/acme/trace_kalos.csv" | seed acme kalos
cat "$F/alibaba2026/job_info_df.csv" | seed alibaba_2026 spot
{ cat "$F/pai/pai_job_table.csv"; printf '\377'; cat "$F/pai/pai_task_table.csv"; printf '\377'
  cat "$F/pai/pai_instance_table.csv"; printf '\377'; cat "$F/pai/pai_sensor_table.csv"; } | seed pai_2020 four-tables
# ordo-db: SQL run on an empty database (an ordo server's tables, a preempted job, a job
# whose run was reported after its requeue, one still running), and the same as a database file.
{ cat ../crates/ordo-trace/tests/data/ordo_db_tables.sql; cat <<'SQL'
INSERT INTO meta VALUES ('policy', 'las');
INSERT INTO nodes VALUES ('a', 1, 8, 1, NULL, 'up', 0, 32, 65536), ('b', 2, 4, 1, 'H100', 'down', 0, NULL, NULL);
INSERT INTO jobs VALUES (1, 'alice', 'x', 2, NULL, NULL, 3600000, 0, 'completed', 1700000000000, 1700000008000, 1700000010000, 'a', 3000);
INSERT INTO audit(time, actor, kind, job, policy, detail) VALUES
  (1700000002000, 'scheduler', 'start', 1, 'las', '{"node":"b","gpu_ids":[0,1]}'),
  (1700000005000, 'scheduler', 'requeue', 1, 'las', '{"why":"preempted","node":"b","ran_ms":3000,"restarts":1}');
INSERT INTO jobs VALUES (2, 'bob', 'y', 1, 4, 1024, 3600000, 0, 'completed', 1700000001000, 1700000001000, 1700000007000, 'a', 5000);
INSERT INTO audit(time, actor, kind, job, policy, detail) VALUES
  (1700000006000, 'scheduler', 'requeue', 2, 'las', '{"why":"node a stopped","node":"a","ran_ms":5000,"restarts":1}');
INSERT INTO jobs VALUES (3, 'carol', 'z', 1, NULL, NULL, 60000, 0, 'running', 1700000004000, 1700000005000, NULL, 'a', 0);
INSERT INTO job_activity VALUES (1, 10, 420.0);
SQL
} | seed ordo_db server.sql
if command -v sqlite3 >/dev/null; then
  rm -f corpus/ordo_db/server.db; sqlite3 corpus/ordo_db/server.db < corpus/ordo_db/server.sql
fi
# Slurm: typed GRES and constraints as the dev cluster's sacct, squeue and sinfo print them.
printf 'JobID|User|Account|Partition|Submit|Start|End|Elapsed|Timelimit|AllocTRES|ReqTRES|State|Priority|Constraints\n3|root|root|gpu|2026-12-04T10:27:17|2026-12-04T10:28:05|2026-12-04T10:29:05|00:01:00|00:05:00|billing=1,cpu=1,gres/gpu:a100=2,gres/gpu=2,node=1|billing=1,cpu=1,gres/gpu:a100=2,gres/gpu=2,mem=4000M,node=1|COMPLETED|4294901757|ib&nvme\n6|root|root|gpu|2026-12-04T10:27:17|2026-12-04T10:27:17|2026-12-04T10:28:17|00:01:00|00:05:00|billing=1,cpu=1,gres/gpu:v100=1,gres/gpu=1,node=1|billing=1,cpu=1,gres/gpu=1,mem=4000M,node=1|COMPLETED|4294901754|[ib|nvme]\n' | seed sacct typed
for c in 'ib&nvme' '[ib|nvme]' '(ib|nvme)&ib' 'ib*1' '[rack1*2&rack2*2]' 'a|b&c' 'ib,nvme'; do printf '%s' "$c" | seed slurm_constraint "$(printf '%s' "$c" | tr -c 'a-z0-9' _)"; done
printf '17|17|N/A|PENDING|4294901745|0|5:00|2026-12-04T10:47:44|2026-12-04T10:52:44|root|root|gpu|cpu=1,mem=4000M,node=1,billing=1,gres/gpu=2,gres/gpu:a100=2|cpu=1,mem=4000M,node=1,billing=1,gres/gpu=2,gres/gpu:a100=2||Resources|1|N/A|gres:gpu:a100:2|1|ib&nvme|\n18|18|N/A|PENDING|4294901744|0|5:00|2026-12-04T10:47:44|2026-12-04T10:52:44|root|root|gpu|cpu=1,mem=4000M,node=1,billing=1,gres/gpu=2|cpu=1,mem=4000M,node=1,billing=1,gres/gpu=2||Priority|1|N/A|gres:gpu:2|1|[ib|nvme]|\n15|15|N/A|RUNNING|4294901747|0|5:00|2026-12-04T10:47:44|2026-12-04T10:47:44|root|root|gpu|cpu=1,node=1,billing=1,gres/gpu=8,gres/gpu:a100=8|cpu=1,node=1,billing=1,gres/gpu=8,gres/gpu:a100=8|n1|None|1|N/A|gres:gpu:a100:8|1|(null)|\n' | seed slurm_queue squeue
printf 'n1|gpu:a100:8|2|4000|mixed|gpu|ib,nvme\nn3|gpu:v100:4|2|4000|mixed|gpu|(null)\nn3|gpu:v100:4|2|4000|mixed|other|(null)\n' | seed slurm_queue sinfo
printf '{"nodes":[{"name":"n1","gres":"gpu:a100:8","active_features":["ib","nvme"],"partitions":["gpu"],"state":["IDLE"]}],"jobs":[{"job_id":3,"job_state":["PENDING"],"features":"ib&nvme","tres_per_node":"gres/gpu:a100:2","tres_req_str":"cpu=1"}]}' | seed slurm_queue rest
# Auto-detection sees every sample.
mkdir -p corpus/trace_reader
for d in corpus/*/; do [ "$d" = corpus/trace_reader/ ] || [ "$d" = corpus/ordo_db/ ] || [ "$d" = corpus/pai_2020/ ] || [ "$d" = corpus/slurm_constraint/ ] || [ "$d" = corpus/slurm_queue/ ] || cp "$d"* corpus/trace_reader/ 2>/dev/null || true; done
for d in corpus/*/; do echo "$d: $(ls "$d" | wc -l) seeds"; done
