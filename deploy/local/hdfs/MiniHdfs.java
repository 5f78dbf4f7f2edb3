// One NameNode and one DataNode of Hadoop 3.3.6 (MiniDFSCluster) in one JVM on 127.0.0.1, for the
// local stack and the integration tests of acidclean. Run without a compile step (Java 11+):
//
//     java -cp "<jars>/*" MiniHdfs.java --port 8020 --base-dir /tmp/state/hdfs
//
// The namespace and blocks live under --base-dir and survive a restart (formatted only on first
// use). Once the DataNode has registered (writes can succeed), the file <base-dir>/ready is written
// with the NameNode URI; deploy/local/hdfs.py waits for it. The process runs until SIGTERM, when a
// shutdown hook stops the cluster cleanly.

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.concurrent.CountDownLatch;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import sun.misc.Signal;
import sun.misc.SignalHandler;

public class MiniHdfs {

    public static void main(String[] args) throws Exception {
        int port = -1;
        File baseDir = null;
        long trashIntervalMinutes = 1440;
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
                case "--port" -> port = Integer.parseInt(args[i + 1]);
                case "--base-dir" -> baseDir = new File(args[i + 1]).getAbsoluteFile();
                case "--trash-interval" -> trashIntervalMinutes = Long.parseLong(args[i + 1]);
                default -> usage("unknown option " + args[i]);
            }
        }
        if (port <= 0 || baseDir == null || args.length % 2 != 0) {
            usage("both --port and --base-dir are required");
        }
        File ready = new File(baseDir, "ready");
        File formatted = new File(baseDir, "formatted");
        Files.deleteIfExists(ready.toPath());
        boolean format = !formatted.exists();

        Configuration conf = new HdfsConfiguration();
        // Any local user may write: the stack has no Kerberos and no HDFS superuser to ask.
        conf.setBoolean("dfs.permissions.enabled", false);
        conf.setInt("dfs.replication", 1);
        // Small blocks: a DataNode refuses a block when its disk has less free space than one block.
        conf.setLong("dfs.blocksize", 16L * 1024 * 1024);
        // Nothing listens beyond 127.0.0.1; the DataNode ports are chosen by the kernel.
        conf.set("dfs.namenode.rpc-bind-host", "127.0.0.1");
        conf.set("dfs.namenode.http-address", "127.0.0.1:0");
        conf.set("dfs.namenode.https-address", "127.0.0.1:0");
        conf.set("dfs.namenode.servicerpc-bind-host", "127.0.0.1");
        conf.set("dfs.datanode.address", "127.0.0.1:0");
        conf.set("dfs.datanode.http.address", "127.0.0.1:0");
        conf.set("dfs.datanode.ipc.address", "127.0.0.1:0");
        conf.set("dfs.datanode.hostname", "127.0.0.1");
        // Leave safe mode as soon as the namespace is loaded: one DataNode holds every block.
        conf.setInt("dfs.namenode.safemode.extension", 0);
        // The trash on, as on a real cluster: clients (hdfs-native's trash() among them) read the
        // NameNode's own fs.trash.interval from its server defaults, whatever their configuration says.
        conf.setLong("fs.trash.interval", trashIntervalMinutes);

        MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf, baseDir)
            .nameNodePort(port)
            .nameNodeHttpPort(0)
            .numDataNodes(1)
            .format(format)
            .checkDataNodeAddrConfig(true)
            .build();
        cluster.waitActive();

        // Stop the daemons before the JVM's shutdown starts: they remove Hadoop's shutdown hooks, which
        // fails (a stack trace per daemon) once the JVM is shutting down. Not MiniDFSCluster.shutdown():
        // it marks every file under the base directory for deletion at exit, the namespace included.
        CountDownLatch stopped = new CountDownLatch(1);
        SignalHandler stop = signal -> {
            System.out.println("MiniHdfs: SIG" + signal.getName() + ", stopping");
            ready.delete();
            cluster.shutdownDataNodes();
            cluster.shutdownNameNodes();
            stopped.countDown();
        };
        Signal.handle(new Signal("TERM"), stop);
        Signal.handle(new Signal("INT"), stop);

        if (format) {
            Files.writeString(formatted.toPath(), "formatted by MiniHdfs\n", StandardCharsets.UTF_8);
        }
        String uri = "hdfs://127.0.0.1:" + cluster.getNameNodePort();
        Files.writeString(ready.toPath(), uri + "\n", StandardCharsets.UTF_8);
        System.out.println("MiniHdfs: ready at " + uri + ", data under " + baseDir);
        stopped.await();
        System.out.println("MiniHdfs: stopped");
        System.exit(0);
    }

    private static void usage(String problem) {
        System.err.println("MiniHdfs: " + problem + "\nusage: MiniHdfs --port PORT --base-dir DIR [--trash-interval MINUTES]");
        System.exit(2);
    }
}
