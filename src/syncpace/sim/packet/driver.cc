// The packet tier's ns-3 program: one run of a set of dependent TCP transfers.
//
// Reads a line-oriented description on stdin (written by syncpace.sim.packet.describe;
// plain tokens because ns-3 ships no JSON reader) and prints one JSON object: each
// transfer's completion time, measured from the moment the job's transfers may start.
//
//   tcp NAME                 TcpNewReno, TcpCubic or TcpBbr (BBR paces its segments)
//   delack COUNT TIMEOUT_S   segments per delayed ACK (1: every segment) and its timer
//   segment BYTES            TCP segment size (MTU less IP and TCP headers)
//   buffer BYTES             socket send and receive buffers
//   minrto S                 the retransmission timer's floor
//   warm S                   time from the start (handshakes, background flows) to the job
//   stop S                   simulated time after which the run gives up
//   hystart 0|1              cubic's hybrid slow start (1, as ns-3 and Linux default)
//   stats                    also print where the time went: each transfer's start, each
//                            connection's retransmissions, timeouts (RTO) and fast
//                            recoveries, each link direction's drops and fullest queue
//   nodes N
//   link A B RATE_BPS DELAY_S QUEUE_BYTES [TBF_BPS BURST_BYTES]
//                                              a full-duplex link, a FIFO of that size each
//                                              way; with the last two, a token bucket of that
//                                              rate and bucket holding QUEUE_BYTES instead
//   addr NODE A.B.C.D MASK                     an address the node answers to and sends from
//   route NODE A.B.C.D MASK LINK               packets for that prefix leave over LINK
//                                              (the first route line drops ns-3's own)
//   conn ID SRC DST SRC_ADDR DST_ADDR          a persistent TCP connection, opened at 0
//   greedy CONN                                the connection sends without end from 0
//   udp SRC DST SRC_ADDR DST_ADDR RATE_BPS     fixed-rate datagrams from 0
//   xfer ID CONN BYTES DELAY_S NDEPS DEP...    sent DELAY_S after its dependencies ended
//   end
//
// A transfer ends when the receiver has read every byte of it: bytes of one connection
// arrive in the order they were written, so the receiver's running count tells which.

#include "ns3/applications-module.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <cstdio>
#include <deque>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using namespace ns3;

namespace
{

struct Transfer
{
    uint32_t conn = 0;
    uint64_t bytes = 0;
    double delay = 0;
    std::vector<uint32_t> next; // transfers that wait on this one
    uint32_t waiting = 0;       // dependencies not yet ended
    double done = -1;
    double start = -1;
};

struct DirStats
{
    uint64_t drops = 0;
    uint32_t maxBytes = 0;
};

struct Conn
{
    uint32_t src = 0, dst = 0;
    Ipv4Address srcAddr, dstAddr;
    uint16_t port = 0;
    Ptr<Socket> tx;
    uint64_t written = 0;  // bytes handed to the socket
    uint64_t queued = 0;   // bytes the job asked for so far
    uint64_t received = 0; // bytes the receiver has read
    bool greedy = false;
    uint32_t retx = 0, rto = 0, recoveries = 0; // with stats: TCP's repairs
    uint32_t maxCwnd = 0, ssthresh = 0;             // with stats: its window, bytes
    double maxRtt = 0;                              // with stats: its smoothed RTT, s
    std::deque<std::pair<uint64_t, uint32_t>> ends; // (running count, transfer) in order
};

std::vector<Transfer> g_xfers;
std::vector<Conn> g_conns;
double g_warm = 0;
uint32_t g_left = 0;
uint64_t g_drops = 0;
bool g_stats = false;
std::vector<DirStats> g_dirs; // with stats: per link, 2 x link + the sending end

void Start(uint32_t id);

void Fill(Conn& c)
{
    static std::vector<uint8_t> zeros(65536, 0);
    while (c.greedy || c.written < c.queued)
    {
        uint64_t want = c.greedy ? zeros.size() : c.queued - c.written;
        uint32_t room = c.tx->GetTxAvailable();
        uint32_t n = static_cast<uint32_t>(std::min<uint64_t>({want, room, zeros.size()}));
        if (n == 0)
        {
            return;
        }
        int sent = c.tx->Send(zeros.data(), n, 0);
        if (sent <= 0)
        {
            return;
        }
        c.written += static_cast<uint64_t>(sent);
    }
}

void OnRoom(uint32_t conn, Ptr<Socket>, uint32_t)
{
    Fill(g_conns[conn]);
}

void Finish(uint32_t id)
{
    Transfer& x = g_xfers[id];
    x.done = Simulator::Now().GetSeconds() - g_warm;
    --g_left;
    for (uint32_t n : x.next)
    {
        if (--g_xfers[n].waiting == 0)
        {
            Simulator::Schedule(Seconds(g_xfers[n].delay), &Start, n);
        }
    }
    if (g_left == 0)
    {
        Simulator::Stop();
    }
}

void OnRead(uint32_t conn, Ptr<Socket> sock)
{
    Conn& c = g_conns[conn];
    Ptr<Packet> p;
    while ((p = sock->Recv()))
    {
        c.received += p->GetSize();
    }
    while (!c.ends.empty() && c.received >= c.ends.front().first)
    {
        uint32_t id = c.ends.front().second;
        c.ends.pop_front();
        Finish(id);
    }
}

void OnAccept(uint32_t conn, Ptr<Socket> sock, const Address&)
{
    sock->SetRecvCallback(MakeBoundCallback(&OnRead, conn));
}

void Start(uint32_t id)
{
    Transfer& x = g_xfers[id];
    Conn& c = g_conns[x.conn];
    x.start = Simulator::Now().GetSeconds() - g_warm;
    c.queued += x.bytes;
    c.ends.emplace_back(c.queued, id);
    if (x.bytes == 0)
    {
        c.ends.pop_back();
        Finish(id);
        return;
    }
    Fill(c);
}

void OnRetx(uint32_t conn, Ptr<const Packet>, const TcpHeader&, const Address&, const Address&,
            Ptr<const TcpSocketBase>)
{
    ++g_conns[conn].retx;
}

void OnCongState(uint32_t conn, TcpSocketState::TcpCongState_t, TcpSocketState::TcpCongState_t now)
{
    // CA_LOSS is entered on a retransmission timeout, CA_RECOVERY on three duplicate ACKs
    if (now == TcpSocketState::CA_LOSS)
    {
        ++g_conns[conn].rto;
    }
    else if (now == TcpSocketState::CA_RECOVERY)
    {
        ++g_conns[conn].recoveries;
    }
}

void OnCwnd(uint32_t conn, uint32_t, uint32_t now)
{
    g_conns[conn].maxCwnd = std::max(g_conns[conn].maxCwnd, now);
}

void OnSsthresh(uint32_t conn, uint32_t, uint32_t now)
{
    g_conns[conn].ssthresh = now;
}

void OnRtt(uint32_t conn, Time, Time now)
{
    g_conns[conn].maxRtt = std::max(g_conns[conn].maxRtt, now.GetSeconds());
}

void OnDirDrop(uint32_t dir, Ptr<const QueueDiscItem>)
{
    ++g_dirs[dir].drops;
}

void OnDirBytes(uint32_t dir, uint32_t, uint32_t now)
{
    g_dirs[dir].maxBytes = std::max(g_dirs[dir].maxBytes, now);
}

void Open(Ptr<Node> src, Ptr<Node> dst, uint32_t i)
{
    Conn& c = g_conns[i];
    Ptr<Socket> rx = Socket::CreateSocket(dst, TcpSocketFactory::GetTypeId());
    rx->Bind(InetSocketAddress(c.dstAddr, c.port));
    rx->Listen();
    rx->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                          MakeBoundCallback(&OnAccept, i));
    c.tx = Socket::CreateSocket(src, TcpSocketFactory::GetTypeId());
    c.tx->Bind(InetSocketAddress(c.srcAddr, 0));
    c.tx->SetSendCallback(MakeBoundCallback(&OnRoom, i));
    if (g_stats)
    {
        c.tx->TraceConnectWithoutContext("Retransmission", MakeBoundCallback(&OnRetx, i));
        c.tx->TraceConnectWithoutContext("CongState", MakeBoundCallback(&OnCongState, i));
        c.tx->TraceConnectWithoutContext("CongestionWindow", MakeBoundCallback(&OnCwnd, i));
        c.tx->TraceConnectWithoutContext("SlowStartThreshold", MakeBoundCallback(&OnSsthresh, i));
        c.tx->TraceConnectWithoutContext("RTT", MakeBoundCallback(&OnRtt, i));
    }
    c.tx->Connect(InetSocketAddress(c.dstAddr, c.port));
    if (c.greedy)
    {
        Fill(c);
    }
}

void OnDiscDrop(Ptr<const QueueDiscItem>)
{
    ++g_drops;
}

[[noreturn]] void Fail(const std::string& what)
{
    std::cerr << "packet driver: " << what << std::endl;
    std::exit(2);
}

struct LinkEnd
{
    uint32_t iface[2];
    Ipv4Address addr[2];
    uint32_t node[2];
};

} // namespace

int main()
{
    std::string tcp = "TcpNewReno";
    uint32_t delack = 2, segment = 1448, buffer = 6 << 20;
    double delackTimeout = 0.04, minRto = 0.2, stop = 600;
    NodeContainer nodes;
    std::vector<LinkEnd> links;
    std::string line, key;
    PointToPointHelper p2p;
    bool configured = false;
    bool routed = false;
    bool hystart = true;
    std::vector<uint32_t> roots;

    auto configure = [&]() {
        if (configured)
        {
            return;
        }
        configured = true;
        Config::SetDefault("ns3::TcpL4Protocol::SocketType", StringValue("ns3::" + tcp));
        Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(segment));
        Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(delack));
        Config::SetDefault("ns3::TcpSocket::DelAckTimeout", TimeValue(Seconds(delackTimeout)));
        Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(10));
        Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(buffer));
        Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(buffer));
        Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(Seconds(minRto)));
        Config::SetDefault("ns3::TcpCubic::HyStart", BooleanValue(hystart));
        Config::SetDefault("ns3::TcpSocketBase::ClockGranularity", TimeValue(MilliSeconds(1)));
        // Linux's net.ipv4.tcp_sack, tcp_timestamps and tcp_window_scaling (all 1), set here
        // so that another ns-3 default cannot change them
        Config::SetDefault("ns3::TcpSocketBase::Sack", BooleanValue(true));
        Config::SetDefault("ns3::TcpSocketBase::Timestamp", BooleanValue(true));
        Config::SetDefault("ns3::TcpSocketBase::WindowScaling", BooleanValue(true));
        // BBR sets its own pacing rate and needs pacing on; Linux paces it in the stack
        Config::SetDefault("ns3::TcpSocketState::EnablePacing", BooleanValue(tcp == "TcpBbr"));
        Config::SetDefault("ns3::TcpSocketState::PaceInitialWindow", BooleanValue(tcp == "TcpBbr"));
        // ns-3 caps pacing at 4 Gbit/s; Linux's sk_max_pacing_rate is unlimited
        Config::SetDefault("ns3::TcpSocketState::MaxPacingRate", DataRateValue(DataRate(uint64_t(1e13))));
    };

    while (std::getline(std::cin, line))
    {
        std::istringstream in(line);
        if (!(in >> key) || key[0] == '#')
        {
            continue;
        }
        if (key == "tcp")
        {
            in >> tcp;
        }
        else if (key == "delack")
        {
            in >> delack >> delackTimeout;
        }
        else if (key == "segment")
        {
            in >> segment;
        }
        else if (key == "buffer")
        {
            in >> buffer;
        }
        else if (key == "minrto")
        {
            in >> minRto;
        }
        else if (key == "warm")
        {
            in >> g_warm;
        }
        else if (key == "stop")
        {
            in >> stop;
        }
        else if (key == "hystart")
        {
            in >> hystart;
        }
        else if (key == "stats")
        {
            g_stats = true;
        }
        else if (key == "nodes")
        {
            configure();
            uint32_t n = 0;
            in >> n;
            nodes.Create(n);
            InternetStackHelper stack;
            stack.Install(nodes);
        }
        else if (key == "link")
        {
            uint32_t a, b;
            double rate, delay, shaped = 0;
            uint64_t queue, burst = 0;
            in >> a >> b >> rate >> delay >> queue;
            if (!in || a >= nodes.GetN() || b >= nodes.GetN())
            {
                Fail("bad line: " + line);
            }
            if (in >> shaped >> burst && (shaped <= 0 || burst == 0))
            {
                Fail("bad line: " + line);
            }
            p2p.SetDeviceAttribute("DataRate", DataRateValue(DataRate(uint64_t(rate))));
            p2p.SetDeviceAttribute("Mtu", UintegerValue(segment + 52));
            p2p.SetChannelAttribute("Delay", TimeValue(Seconds(delay)));
            // as on Linux: a short device queue behind a queue discipline, here a FIFO of
            // the shaper's bytes (the device stops the discipline while it is full)
            p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", StringValue("2p"));
            NetDeviceContainer devs = p2p.Install(nodes.Get(a), nodes.Get(b));
            TrafficControlHelper tch;
            QueueSizeValue limit(QueueSize(QueueSizeUnit::BYTES, uint32_t(queue)));
            if (burst > 0)
            {
                // Linux's tbf: a rested bucket lets BURST bytes leave at the device's speed
                tch.SetRootQueueDisc("ns3::TbfQueueDisc",
                                     "MaxSize", limit,
                                     "Rate", DataRateValue(DataRate(uint64_t(shaped))),
                                     "Burst", UintegerValue(uint32_t(burst)));
            }
            else
            {
                tch.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize", limit);
            }
            QueueDiscContainer discs = tch.Install(devs);
            LinkEnd end;
            uint32_t i = links.size();
            // one /30 per link out of 11.0.0.0/8
            uint32_t base = (11u << 24) + 4 * i;
            for (int k = 0; k < 2; ++k)
            {
                Ptr<NetDevice> dev = devs.Get(k);
                discs.Get(k)->TraceConnectWithoutContext("Drop", MakeCallback(&OnDiscDrop));
                if (g_stats)
                {
                    uint32_t dir = 2 * links.size() + k;
                    g_dirs.resize(dir + 1);
                    discs.Get(k)->TraceConnectWithoutContext("Drop", MakeBoundCallback(&OnDirDrop, dir));
                    discs.Get(k)->TraceConnectWithoutContext("BytesInQueue",
                                                             MakeBoundCallback(&OnDirBytes, dir));
                }
                Ptr<Ipv4> ip = dev->GetNode()->GetObject<Ipv4>();
                uint32_t iface = ip->AddInterface(dev);
                end.addr[k] = Ipv4Address(base + 1 + k);
                ip->AddAddress(iface, Ipv4InterfaceAddress(end.addr[k], Ipv4Mask("/30")));
                ip->SetUp(iface);
                end.iface[k] = iface;
                end.node[k] = k == 0 ? a : b;
            }
            links.push_back(end);
        }
        else if (key == "addr")
        {
            uint32_t n;
            std::string a, mask;
            in >> n >> a >> mask;
            Ptr<Ipv4> ip = nodes.Get(n)->GetObject<Ipv4>();
            // on every link of the node, with the mask that makes it the source ns-3
            // picks toward the addresses of its subnet (the one a flow's spine names)
            for (uint32_t i = 1; i < ip->GetNInterfaces(); ++i)
            {
                ip->AddAddress(i, Ipv4InterfaceAddress(Ipv4Address(a.c_str()), Ipv4Mask(mask.c_str())));
            }
        }
        else if (key == "route")
        {
            uint32_t n, l;
            std::string dest, mask;
            in >> n >> dest >> mask >> l;
            if (!in || l >= links.size())
            {
                Fail("bad line: " + line);
            }
            const LinkEnd& e = links[l];
            int k = e.node[0] == n ? 0 : 1;
            if (e.node[k] != n)
            {
                Fail("route over a link the node is not on: " + line);
            }
            Ipv4StaticRoutingHelper helper;
            if (!routed)
            {
                // the routes ns-3 made of each address: every route is the description's
                routed = true;
                for (uint32_t m = 0; m < nodes.GetN(); ++m)
                {
                    Ptr<Ipv4StaticRouting> r = helper.GetStaticRouting(nodes.Get(m)->GetObject<Ipv4>());
                    while (r->GetNRoutes() > 0)
                    {
                        r->RemoveRoute(0);
                    }
                }
            }
            Ptr<Ipv4StaticRouting> r = helper.GetStaticRouting(nodes.Get(n)->GetObject<Ipv4>());
            // point-to-point: no gateway to resolve, the link's far end takes it
            r->AddNetworkRouteTo(Ipv4Address(dest.c_str()), Ipv4Mask(mask.c_str()), e.iface[k]);
        }
        else if (key == "conn")
        {
            uint32_t id;
            Conn c;
            std::string sa, da;
            in >> id >> c.src >> c.dst >> sa >> da;
            if (!in || id != g_conns.size())
            {
                Fail("bad line: " + line);
            }
            c.srcAddr = Ipv4Address(sa.c_str());
            c.dstAddr = Ipv4Address(da.c_str());
            c.port = static_cast<uint16_t>(1024 + id % 60000);
            g_conns.push_back(c);
        }
        else if (key == "greedy")
        {
            uint32_t id;
            in >> id;
            g_conns.at(id).greedy = true;
        }
        else if (key == "udp")
        {
            uint32_t s, d;
            std::string sa, da;
            double rate;
            in >> s >> d >> sa >> da >> rate;
            static uint16_t udpPort = 9;
            uint16_t port = udpPort++;
            PacketSinkHelper sink("ns3::UdpSocketFactory",
                                  InetSocketAddress(Ipv4Address(da.c_str()), port));
            sink.Install(nodes.Get(d));
            OnOffHelper onoff("ns3::UdpSocketFactory",
                              InetSocketAddress(Ipv4Address(da.c_str()), port));
            onoff.SetConstantRate(DataRate(uint64_t(rate)), segment + 12);
            onoff.SetAttribute("Local", AddressValue(InetSocketAddress(Ipv4Address(sa.c_str()), 0)));
            onoff.Install(nodes.Get(s)).Start(Seconds(0));
        }
        else if (key == "xfer")
        {
            uint32_t id, n;
            Transfer x;
            in >> id >> x.conn >> x.bytes >> x.delay >> n;
            if (!in || id != g_xfers.size() || x.conn >= g_conns.size())
            {
                Fail("bad line: " + line);
            }
            x.waiting = n;
            g_xfers.push_back(x);
            for (uint32_t k = 0; k < n; ++k)
            {
                uint32_t dep;
                in >> dep;
                if (!in || dep >= id)
                {
                    Fail("a dependency must come first: " + line);
                }
                g_xfers[dep].next.push_back(id);
            }
            if (n == 0)
            {
                roots.push_back(id);
            }
        }
        else if (key == "end")
        {
            break;
        }
        else
        {
            Fail("unknown line: " + line);
        }
    }

    // opened once the simulation runs: traffic control learns its devices then
    for (uint32_t i = 0; i < g_conns.size(); ++i)
    {
        Simulator::Schedule(Seconds(0), &Open, nodes.Get(g_conns[i].src), nodes.Get(g_conns[i].dst), i);
    }
    g_left = g_xfers.size();
    for (uint32_t id : roots)
    {
        Simulator::Schedule(Seconds(g_warm + g_xfers[id].delay), &Start, id);
    }
    if (g_left > 0)
    {
        Simulator::Stop(Seconds(g_warm + stop));
        Simulator::Run();
    }
    double now = Simulator::Now().GetSeconds();
    Simulator::Destroy();

    std::ostringstream out;
    out.precision(12);
    out << "{\"done\": [";
    for (size_t i = 0; i < g_xfers.size(); ++i)
    {
        out << (i ? ", " : "") << g_xfers[i].done;
    }
    out << "], \"unfinished\": " << g_left << ", \"drops\": " << g_drops
        << ", \"simulated_s\": " << now;
    if (g_stats)
    {
        out << ", \"start\": [";
        for (size_t i = 0; i < g_xfers.size(); ++i)
        {
            out << (i ? ", " : "") << g_xfers[i].start;
        }
        out << "], \"conns\": [";
        for (size_t i = 0; i < g_conns.size(); ++i)
        {
            const Conn& c = g_conns[i];
            out << (i ? ", " : "") << "[" << c.retx << ", " << c.rto << ", " << c.recoveries << ", "
                << c.maxCwnd << ", " << c.ssthresh << ", " << c.maxRtt << "]";
        }
        out << "], \"dirs\": [";
        for (size_t i = 0; i < g_dirs.size(); ++i)
        {
            out << (i ? ", " : "") << "[" << g_dirs[i].drops << ", " << g_dirs[i].maxBytes << "]";
        }
        out << "]";
    }
    out << "}";
    std::cout << out.str() << std::endl;
    return 0;
}
