package main

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"text/tabwriter"

	_ "github.com/goverbs/goverbs/provider/loop"
	"github.com/goverbs/goverbs/provider/rdmacore" // real devices, in a build with -tags rdmacore
	"github.com/goverbs/goverbs/provider/roce"
	"github.com/goverbs/goverbs/verbs"
)

const devicesHelp = `usage: goverbs devices [-v] [-d DEV]

Lists the RDMA devices of the providers built into goverbs (like
ibv_devices), with the IP address each RoCE device (roce0, roce1, ...: one
per local address) and each rdma-core device serves; with -v, each
device's attributes and ports (like ibv_devinfo); with -d, that device
only.
`

// deviceAddr returns the IP address the device serves: a RoCE device's
// own, an rdma-core device's interface's.
func deviceAddr(name string) (netip.Addr, bool) {
	if a, ok := roce.DeviceAddr(name); ok {
		return a, true
	}
	return rdmacore.DeviceAddr(name)
}

func devices(args []string) error {
	fs := newCommand("devices", devicesHelp)
	verbose := fs.BoolP("verbose", "v", false, "print attributes and ports")
	dev := fs.StringP("ib-dev", "d", "", "this device only")
	fs.refuseCapture("devices moves no RDMA traffic")
	args, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := fs.noArgs(args); err != nil {
		return err
	}
	devs := verbs.Devices()
	if *dev != "" {
		var names []string
		for _, d := range devs {
			if d.Name() == *dev {
				devs = []*verbs.Device{d}
				break
			}
			names = append(names, d.Name())
		}
		if len(devs) != 1 || devs[0].Name() != *dev {
			return badUsage("devices", "-d %s: no such device (there are %s)", *dev, strings.Join(names, ", "))
		}
	}
	if !*verbose {
		w := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', 0)
		fmt.Fprintln(w, "device\tnode GUID\ttransport\taddress")
		fmt.Fprintln(w, "------\t---------\t---------\t-------")
		for _, d := range devs {
			addr := "-"
			if a, ok := deviceAddr(d.Name()); ok {
				addr = a.String()
			}
			fmt.Fprintf(w, "%s\t%016x\t%v\t%s\n", d.Name(), d.GUID(), d.TransportType(), addr)
		}
		return w.Flush()
	}
	for _, d := range devs {
		ctx, err := d.Open()
		if err != nil {
			return err
		}
		a := ctx.QueryDevice()
		fmt.Printf("hca_id:\t%s\n", d.Name())
		fmt.Printf("\ttransport:\t\t\t%v\n", d.TransportType())
		fmt.Printf("\tnode_type:\t\t\t%v\n", d.NodeType())
		fmt.Printf("\tfw_ver:\t\t\t\t%s\n", a.FWVer)
		fmt.Printf("\tnode_guid:\t\t\t%016x\n", a.NodeGUID)
		if ip, ok := deviceAddr(d.Name()); ok {
			fmt.Printf("\tip_addr:\t\t\t%v\n", ip)
		}
		fmt.Printf("\tmax_mr_size:\t\t\t%#x\n", a.MaxMRSize)
		fmt.Printf("\tmax_qp:\t\t\t\t%d\n", a.MaxQP)
		fmt.Printf("\tmax_qp_wr:\t\t\t%d\n", a.MaxQPWR)
		fmt.Printf("\tmax_sge:\t\t\t%d\n", a.MaxSGE)
		fmt.Printf("\tmax_sge_rd:\t\t\t%d\n", a.MaxSGERd)
		fmt.Printf("\tmax_cq:\t\t\t\t%d\n", a.MaxCQ)
		fmt.Printf("\tmax_cqe:\t\t\t%d\n", a.MaxCQE)
		fmt.Printf("\tmax_mr:\t\t\t\t%d\n", a.MaxMR)
		fmt.Printf("\tmax_pd:\t\t\t\t%d\n", a.MaxPD)
		fmt.Printf("\tmax_qp_rd_atom:\t\t\t%d\n", a.MaxQPRdAtom)
		fmt.Printf("\tmax_qp_init_rd_atom:\t\t%d\n", a.MaxQPInitRdAtom)
		fmt.Printf("\tatomic_cap:\t\t\tATOMIC_%v\n", a.AtomicCap)
		fmt.Printf("\tmax_srq:\t\t\t%d\n", a.MaxSRQ)
		fmt.Printf("\tmax_srq_wr:\t\t\t%d\n", a.MaxSRQWR)
		fmt.Printf("\tmax_inline_data:\t\t%d\n", a.MaxInlineData)
		fmt.Printf("\tphys_port_cnt:\t\t\t%d\n", a.PhysPortCnt)
		for p := uint8(1); p <= a.PhysPortCnt; p++ {
			pa, err := ctx.QueryPort(p)
			if err != nil {
				return err
			}
			gid, _ := ctx.QueryGID(p, 0)
			fmt.Printf("\t\tport:\t%d\n", p)
			fmt.Printf("\t\t\tstate:\t\t\t%v (%d)\n", pa.State, pa.State)
			fmt.Printf("\t\t\tmax_mtu:\t\t%v (%d)\n", pa.MaxMTU, pa.MaxMTU)
			fmt.Printf("\t\t\tactive_mtu:\t\t%v (%d)\n", pa.ActiveMTU, pa.ActiveMTU)
			fmt.Printf("\t\t\tport_lid:\t\t%d\n", pa.LID)
			fmt.Printf("\t\t\tlink_layer:\t\t%v\n", pa.LinkLayer)
			fmt.Printf("\t\t\tGID[0]:\t\t\t%v\n", gid)
		}
		ctx.Close()
	}
	return nil
}
