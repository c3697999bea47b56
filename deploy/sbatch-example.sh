#!/bin/bash
# sbatch-example.sh -- a training job under firebreak on a real Slurm cluster
# (docs/slurm.md).  Submit with:  sbatch deploy/sbatch-example.sh
#
# --nodes: the job's nodes PLUS the spares firebreak may restart on
# (--spare-nodes below).  Here 8 nodes train, 1 waits as a spare.
#SBATCH --job-name=train
#SBATCH --nodes=9
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
#SBATCH --time=24:00:00
# Slurm's warning 120 s before the time limit: firebreak forwards SIGUSR1 to
# every rank, which saves a checkpoint and exits 0.  "B:" sends it to the
# batch shell only, i.e. to firebreak (which `exec` below makes the shell).
#SBATCH --signal=B:USR1@120
# Let `firebreak run --on-no-nodes requeue` put the job back in the queue
# when too few healthy nodes remain.
#SBATCH --requeue
# Keep the allocation when one of its nodes fails: firebreak detects the
# lost node (node_failure), leaves it out and restarts on a spare.
#SBATCH --no-kill
#SBATCH --output=%x-%j.out

# Checkpoints and the run directory must be on a filesystem every node sees
# (Lustre, GPFS, NFS...): ranks on any node restore from them after a
# restart.  Rank segments stay per node, in /dev/shm.
RUN_ROOT=/shared/runs/$SLURM_JOB_NAME

# --launcher slurm      ranks with srun on the allocation's nodes, one
#                       `firebreak watch` per node streaming status back
# --nproc-per-node 8    ranks per node (one per GPU)
# --spare-nodes 1       nodes kept out of the job, for restarts
# --health-check        `firebreak health` on every node before each launch;
#                       failing nodes are left out
# --drain               drain a node found at fault (scontrol update
#                       NodeName=.. State=DRAIN Reason="firebreak: ..."): needs
#                       a user Slurm lets drain nodes (operator or admin)
# --on-no-nodes requeue when fewer healthy nodes remain than the job needs:
#                       scontrol requeue this job (default: stop)
# --hang-timeout 10m    no step progress for this long = hang -> restart
# --ckpt-dir            shared by every run of this job: a requeued job
#                       resumes from the newest complete checkpoint
# --run-dir             one per start of the Slurm job (journal, logs)
exec firebreak run --launcher slurm --nproc-per-node 8 --spare-nodes 1 \
    --health-check --drain --on-no-nodes requeue --max-restarts 10 \
    --hang-timeout 10m --ckpt-dir "$RUN_ROOT/checkpoints" \
    --run-dir "$RUN_ROOT/$SLURM_JOB_ID-${SLURM_RESTART_COUNT:-0}" \
    -- ./train --config config.yaml
