package main

import (
	"fmt"
	"os"
	"text/tabwriter"

	_ "github.com/goverbs/goverbs/provider/loop"
	_ "github.com/goverbs/goverbs/provider/rdmacore" // real devices, in a build with -tags rdmacore
	"github.com/goverbs/goverbs/verbs"
)

const devicesHelp = `usage: goverbs devices [-v]

Lists the RDMA devices of the providers built into goverbs (like
ibv_devices); with -v, each device's attributes and ports (like
ibv_devinfo).
`

func devices(args []string) error {
	fs := newCommand("devices", devicesHelp)
	verbose := fs.BoolP("verbose", "v", false, "print attributes and ports")
	args, err := fs.parse(args)
	if err != nil {
		return err
	}
	if err := fs.noArgs(args); err != nil {
		return err
	}
	devs := verbs.Devices()
	if !*verbose {
		w := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', 0)
		fmt.Fprintln(w, "device\tnode GUID\ttransport")
		fmt.Fprintln(w, "------\t---------\t---------")
		for _, d := range devs {
			fmt.Fprintf(w, "%s\t%016x\t%v\n", d.Name(), d.GUID(), d.TransportType())
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
