#!/bin/bash
# make_fixtures.sh -- (re)generate the fixture trees under fixtures/.
# Each scenario is a healthy 8-GPU node (fixtures/healthy) with one fault
# added; nvml.txt is the NVML double's scenario file.  The trees are
# committed; rerun this after changing it and review the diff.
set -euo pipefail
cd "$(dirname "$0")/fixtures"

kmsg_base() {
    cat <<'K'
6,1,0,-;Linux version 6.1.0-18-amd64 (debian-kernel@lists.debian.org)
 SUBSYSTEM=cpu
6,2,1520000,-;nvidia: module license 'NVIDIA' taints kernel.
6,3,2500123,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15
4,4,3600000,-;mlx5_core 0000:c1:00.0: Port module event: module 0, Cable plugged
6,5,86000000000,-;systemd[1]: Started firebreak-agent.service.
K
}

healthy() {
    local d=$1
    rm -rf "$d"
    mkdir -p "$d/proc" "$d/dev/shm"
    echo "86400.00 170000.00" > "$d/proc/uptime"
    : > "$d/dev/shm/.keep"
    kmsg_base > "$d/dev/kmsg"
    for mc in 0 1; do
        mkdir -p "$d/sys/devices/system/edac/mc/mc$mc"
        echo 0 > "$d/sys/devices/system/edac/mc/mc$mc/ce_count"
        echo 0 > "$d/sys/devices/system/edac/mc/mc$mc/ue_count"
    done
    for dev in mlx5_0 mlx5_1; do
        local p="$d/sys/class/infiniband/$dev/ports/1"
        mkdir -p "$p/counters"
        echo "4: ACTIVE" > "$p/state"
        echo "400 Gb/sec (4X NDR)" > "$p/rate"
        for c in symbol_error link_downed port_rcv_errors link_error_recovery \
                 port_xmit_discards; do
            echo 0 > "$p/counters/$c"
        done
    done
    for bdf in 0000:18:00.0 0000:28:00.0; do
        local p="$d/sys/bus/pci/devices/$bdf"
        mkdir -p "$p"
        printf 'RxErr 0\nBadTLP 0\nBadDLLP 0\nRollover 0\nTimeout 0\nNonFatalErr 0\nCorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR 0\n' > "$p/aer_dev_correctable"
        printf 'Undefined 0\nDLP 0\nSDES 0\nTLP 0\nFCP 0\nCmpltTO 0\nCmpltAbrt 0\nUnxCmplt 0\nRxOF 0\nMalfTLP 0\nECRC 0\nUnsupReq 0\nACSViol 0\nTOTAL_ERR_FATAL 0\n' > "$p/aer_dev_fatal"
        printf 'Undefined 0\nDLP 0\nSDES 0\nTLP 0\nFCP 0\nCmpltTO 0\nCmpltAbrt 0\nUnxCmplt 0\nRxOF 0\nMalfTLP 0\nECRC 0\nUnsupReq 0\nACSViol 0\nTOTAL_ERR_NONFATAL 0\n' > "$p/aer_dev_nonfatal"
    done
    for z in 0 1; do
        local p="$d/sys/class/thermal/thermal_zone$z"
        mkdir -p "$p"
        echo x86_pkg_temp > "$p/type"
        echo $((45000 + z * 2000)) > "$p/temp"
        echo critical > "$p/trip_point_0_type"
        echo 100000 > "$p/trip_point_0_temp"
    done
    mkdir -p "$d/sys/class/hwmon/hwmon0" "$d/sys/class/hwmon/hwmon1"
    echo coretemp > "$d/sys/class/hwmon/hwmon0/name"
    echo 52000 > "$d/sys/class/hwmon/hwmon0/temp1_input"
    echo power_meter > "$d/sys/class/hwmon/hwmon1/name"
    echo 5200000000 > "$d/sys/class/hwmon/hwmon1/power1_average"
    for z in 0 1; do
        local p="$d/sys/class/powercap/intel-rapl:$z"
        mkdir -p "$p"
        echo "package-$z" > "$p/name"
        echo 123456789 > "$p/energy_uj"
        echo 262143328850 > "$p/max_energy_range_uj"
    done
    cat > "$d/nvml.txt" <<'N'
# healthy 8-GPU H100 node
count 8
* temp 41
* power_mw 412000
* limit_mw 700000
N
}

scenario() { # name: healthy copy to add a fault to
    healthy "$1"
}

healthy healthy

scenario gpu-lost
echo "3 lost 1" >> gpu-lost/nvml.txt
echo "4,6,86100000000,-;NVRM: Xid (PCI:0000:48:00): 79, pid=4242, name=python3, GPU has fallen off the bus." >> gpu-lost/dev/kmsg

scenario hbm-remap-failure
printf '5 remap_failure 1\n5 remap_unc 7\n5 remap_corr 2\n' >> hbm-remap-failure/nvml.txt
echo "4,6,86100000000,-;NVRM: Xid (PCI:0000:68:00): 64, pid=4242, name=python3, Row remapping failure" >> hbm-remap-failure/dev/kmsg

scenario uncorrectable-ecc
printf '2 ecc_unc 3\n2 ecc_corr 17\n' >> uncorrectable-ecc/nvml.txt
echo "4,6,86100000000,-;NVRM: Xid (PCI:0000:38:00): 48, pid=4242, name=python3, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0." >> uncorrectable-ecc/dev/kmsg

scenario thermal-slowdown
printf '6 temp 93\n6 reasons 0x60\n6 sm_mhz 1410\n' >> thermal-slowdown/nvml.txt

scenario pcie-downtrained
printf '1 pcie_gen 3\n1 pcie_width 8\n1 replay 57\n' >> pcie-downtrained/nvml.txt

scenario nvlink-errors
printf '4 nvlink_down 0x8\n4 nvlink_err_mask 0x30\n4 nvlink_errors 1234\n' >> nvlink-errors/nvml.txt
echo "4,6,86100000000,-;NVRM: Xid (PCI:0000:58:00): 74, pid=4242, name=python3, NVLink: fatal error detected on link 3" >> nvlink-errors/dev/kmsg

scenario app-xid
cat >> app-xid/dev/kmsg <<'K'
4,6,86100000000,-;NVRM: Xid (PCI:0000:18:00): 13, pid=4242, name=python3, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address
4,7,86100000100,-;NVRM: Xid (PCI:0000:18:00): 31, pid=4242, name=python3, Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f12_34560000.
4,8,86100000200,-;NVRM: Xid (0000:18:00): 13, pid=4243, name=python3, Graphics Exception: ESR 0x504648=0x1000e
K

scenario old-xid
echo "4,6,1000000,-;NVRM: Xid (PCI:0000:48:00): 79, pid=1, name=early, GPU has fallen off the bus." >> old-xid/dev/kmsg

scenario recovery-action
printf '7 recovery 2\n' >> recovery-action/nvml.txt
echo "4,6,86100000000,-;NVRM: Xid (PCI:0000:88:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)" >> recovery-action/dev/kmsg

scenario edac-ue
echo 2 > edac-ue/sys/devices/system/edac/mc/mc1/ue_count
echo 40 > edac-ue/sys/devices/system/edac/mc/mc1/ce_count

scenario ib-down
echo "1: DOWN" > ib-down/sys/class/infiniband/mlx5_1/ports/1/state
echo 3 > ib-down/sys/class/infiniband/mlx5_1/ports/1/counters/link_downed
echo 118 > ib-down/sys/class/infiniband/mlx5_1/ports/1/counters/symbol_error

scenario aer-fatal
sed -i 's/TOTAL_ERR_FATAL 0/TOTAL_ERR_FATAL 1/; s/^CmpltTO 0/CmpltTO 1/' aer-fatal/sys/bus/pci/devices/0000:28:00.0/aer_dev_fatal

scenario host-hot
echo 101000 > host-hot/sys/class/thermal/thermal_zone1/temp

# Bad input everywhere: junk in sysfs, a truncated kernel log, absurd NVML
# readings.  Expected: warnings naming the file, never a crash.
scenario malformed
echo "lots" > malformed/sys/devices/system/edac/mc/mc0/ce_count
echo "ACTIVE" > malformed/sys/class/infiniband/mlx5_0/ports/1/state
printf 'RxErr zero\n' > malformed/sys/bus/pci/devices/0000:18:00.0/aer_dev_correctable
echo "-" > malformed/sys/class/thermal/thermal_zone0/temp
printf '0 temp 4000\n0 power_mw 99000000\n' >> malformed/nvml.txt
{
    echo "garbage line without a record header"
    echo "4,9,86100000000,-;NVRM: Xid (PCI:0000:18:00 79, pid=1 truncated"
    printf '4,10,86100000001,-;NVRM: Xid (PCI:0000:28:0'
} >> malformed/dev/kmsg

# No NVIDIA driver: the test runs it without FIREBREAK_NVML_LIB.
scenario no-driver
rm no-driver/nvml.txt
