// Apache Hive's own ACID reader code run over a table directory, for the interop test
// tests/integration/test_hive_reader_interop.py. Compiled against hive-exec 3.1.3 or 4.0.1 (the jars of
// deploy/local/hive-reader/hive{3,4}/pom.xml); what differs between the two is called by reflection.
//
//   read LOCATION[,LOCATION...] WRITE_IDS TXNS COLUMNS TYPES BUCKETS
//       For each location (a table or partition directory): Hive's AcidUtils.getAcidState, the row
//       reader (OrcInputFormat.getSplits + getRecordReader, OrcRawRecordMerger underneath) and the
//       vectorized ACID reader (VectorizedOrcAcidRowBatchReader), each under the valid write id list
//       WRITE_IDS and txn list TXNS. COLUMNS is "id,v", TYPES "int:string" (Hive's columns.types),
//       BUCKETS the table's bucket_count (Hive 3 makes a delta-only split per bucket number).
//       Prints JSON lines: {"reader": "acid_state"|"rows"|"vectorized", "location": ..., ...}; a reader
//       that fails prints {"reader": ..., "error": ...} and the next one still runs.
//   markers DIRECTORY
//       Writes into DIRECTORY the side files Hive's compactor writes into a base it creates: the
//       _orc_acid_version of OrcAcidVersion.writeVersionFile and the _metadata_acid of
//       MetaDataFile.createCompactorMarker (Hive 3) or AcidMetaDataFile.writeToFile(COMPACTED) (Hive 4).
//
// In Hive's package for the package-private VectorizedOrcAcidRowBatchReader constructor Hive's own
// OrcInputFormat calls, and OrcStruct.getFieldValue.
package org.apache.hadoop.hive.ql.io.orc;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.lang.reflect.Method;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.hive.common.ValidTxnList;
import org.apache.hadoop.hive.common.ValidWriteIdList;
import org.apache.hadoop.hive.common.type.DataTypePhysicalVariation;
import org.apache.hadoop.hive.ql.exec.vector.BytesColumnVector;
import org.apache.hadoop.hive.ql.exec.vector.ColumnVector;
import org.apache.hadoop.hive.ql.exec.vector.DoubleColumnVector;
import org.apache.hadoop.hive.ql.exec.vector.LongColumnVector;
import org.apache.hadoop.hive.ql.exec.vector.StructColumnVector;
import org.apache.hadoop.hive.ql.exec.vector.VectorizedRowBatch;
import org.apache.hadoop.hive.ql.exec.vector.VectorizedRowBatchCtx;
import org.apache.hadoop.hive.ql.io.AcidInputFormat;
import org.apache.hadoop.hive.ql.io.AcidUtils;
import org.apache.hadoop.hive.ql.io.IOConstants;
import org.apache.hadoop.hive.ql.io.RecordIdentifier;
import org.apache.hadoop.hive.ql.metadata.VirtualColumn;
import org.apache.hadoop.hive.serde2.typeinfo.TypeInfo;
import org.apache.hadoop.hive.serde2.typeinfo.TypeInfoUtils;
import org.apache.hadoop.io.NullWritable;
import org.apache.hadoop.mapred.FileInputFormat;
import org.apache.hadoop.mapred.InputSplit;
import org.apache.hadoop.mapred.JobConf;
import org.apache.hadoop.mapred.RecordReader;
import org.apache.hadoop.mapred.Reporter;

public class HiveAcidReader {
  public static void main(String[] args) throws Exception {
    if (args.length == 2 && args[0].equals("markers")) {
      markers(new Path(args[1]));
    } else if (args.length == 7 && args[0].equals("read")) {
      for (String location : args[1].split(",")) {
        read(location, args[2], args[3], args[4], args[5], Integer.parseInt(args[6]));
      }
    } else {
      System.err.println("usage: read LOCATION[,LOCATION...] WRITE_IDS TXNS COLUMNS TYPES BUCKETS | markers DIRECTORY");
      System.exit(2);
    }
    System.out.flush();
  }

  static void markers(Path directory) throws Exception {
    FileSystem fs = FileSystem.getLocal(new JobConf()).getRaw();
    AcidUtils.OrcAcidVersion.writeVersionFile(directory, fs);
    try {  // Hive 3.1: the compactor's MetaDataFile.createCompactorMarker
      Method marker = AcidUtils.MetaDataFile.class.getMethod("createCompactorMarker", Path.class, FileSystem.class);
      marker.invoke(null, directory, fs);
    } catch (NoSuchMethodException hive4) {  // Hive 4: AcidMetaDataFile.writeToFile(fs, dir, COMPACTED)
      Class<?> file = Class.forName("org.apache.hadoop.hive.common.AcidMetaDataFile");
      Class<?> format = Class.forName("org.apache.hadoop.hive.common.AcidMetaDataFile$DataFormat");
      Object compacted = format.getField("COMPACTED").get(null);
      file.getMethod("writeToFile", FileSystem.class, Path.class, format).invoke(null, fs, directory, compacted);
    }
  }

  static JobConf conf(String location, String writeIds, String txns, String columns, String types) throws Exception {
    JobConf conf = new JobConf();
    conf.set(ValidWriteIdList.VALID_WRITEIDS_KEY, writeIds);
    conf.set(ValidTxnList.VALID_TXNS_KEY, txns);
    conf.set("transactional", "true");  // the table's properties, as HiveInputFormat copies them
    conf.set("transactional_properties", "default");
    conf.set("columns", columns);
    conf.set("columns.types", types);
    conf.set(IOConstants.SCHEMA_EVOLUTION_COLUMNS, columns);
    conf.set(IOConstants.SCHEMA_EVOLUTION_COLUMNS_TYPES, types);
    conf.setBoolean("hive.io.file.read.all.columns", true);
    conf.setBoolean("hive.vectorized.execution.enabled", false);
    conf.set("hive.orc.splits.include.file.footer", "false");
    conf.set("hive.exec.orc.split.strategy", "BI");
    AcidUtils.setAcidOperationalProperties(conf, true, AcidUtils.AcidOperationalProperties.getDefault());
    FileInputFormat.setInputPaths(conf, new Path(location));
    return conf;
  }

  static void read(String location, String writeIds, String txns, String columns, String types, int buckets) {
    String[] names = columns.split(",");
    List<TypeInfo> typeInfos = TypeInfoUtils.getTypeInfosFromTypeString(types);
    JobConf conf;
    try {
      conf = conf(location, writeIds, txns, columns, types);
      conf.setInt("bucket_count", buckets);
    } catch (Throwable error) {
      fail("setup", location, error);
      return;
    }
    try {
      acidState(conf, location, writeIds);
    } catch (Throwable error) {
      fail("acid_state", location, error);
    }
    try {
      rows(conf, location, names.length);
    } catch (Throwable error) {
      fail("rows", location, error);
    }
    try {
      vectorized(conf, location, names, typeInfos);
    } catch (Throwable error) {
      fail("vectorized", location, error);
    }
  }

  static void acidState(JobConf conf, String location, String writeIds) throws Throwable {
    Path path = new Path(location);
    ValidWriteIdList ids = new org.apache.hadoop.hive.common.ValidReaderWriteIdList(writeIds);
    Object directory;
    Class<?> conf_ = org.apache.hadoop.conf.Configuration.class;
    MethodHandles.Lookup lookup = MethodHandles.publicLookup();  // resolves the one signature asked for
    try {  // Hive 3.1
      directory = lookup.findStatic(AcidUtils.class, "getAcidState",
          MethodType.methodType(AcidUtils.Directory.class, Path.class, conf_, ValidWriteIdList.class))
          .invoke(path, conf, ids);
    } catch (NoSuchMethodException hive4) {
      Class<?> ref = Class.forName("org.apache.hive.common.util.Ref");
      Class<?> acidDirectory = Class.forName("org.apache.hadoop.hive.ql.io.AcidDirectory");
      Object noFileIds = lookup.findStatic(ref, "from", MethodType.methodType(ref, Object.class)).invoke(false);
      directory = lookup.findStatic(AcidUtils.class, "getAcidState", MethodType.methodType(acidDirectory,
              FileSystem.class, Path.class, conf_, ValidWriteIdList.class, ref, boolean.class))
          .invoke(path.getFileSystem(conf), path, conf, ids, noFileIds, false);
    }
    Path base = (Path) directory.getClass().getMethod("getBaseDirectory").invoke(directory);
    List<String> deltas = new ArrayList<>();
    for (Object delta : (List<?>) directory.getClass().getMethod("getCurrentDirectories").invoke(directory)) {
      deltas.add(((Path) delta.getClass().getMethod("getPath").invoke(delta)).getName());
    }
    List<String> obsolete = new ArrayList<>();
    for (Object entry : (List<?>) directory.getClass().getMethod("getObsolete").invoke(directory)) {
      Path obsoletePath = entry instanceof Path ? (Path) entry : ((org.apache.hadoop.fs.FileStatus) entry).getPath();
      obsolete.add(obsoletePath.getName());
    }
    System.out.println("{\"reader\":\"acid_state\",\"location\":" + quote(location) + ",\"base\":"
        + (base == null ? "null" : quote(base.getName())) + ",\"deltas\":" + quoteAll(deltas)
        + ",\"obsolete\":" + quoteAll(obsolete) + "}");
  }

  static void rows(JobConf conf, String location, int columnCount) throws Exception {
    OrcInputFormat format = new OrcInputFormat();
    List<String> out = new ArrayList<>();
    InputSplit[] splits = format.getSplits(conf, 1);
    for (InputSplit split : splits) {
      RecordReader<NullWritable, OrcStruct> reader = format.getRecordReader(split, conf, Reporter.NULL);
      try {
        NullWritable key = reader.createKey();
        OrcStruct value = reader.createValue();
        while (reader.next(key, value)) {
          RecordIdentifier id = ((AcidInputFormat.AcidRecordReader<?, ?>) reader).getRecordIdentifier();
          List<String> values = new ArrayList<>();
          for (int i = 0; i < columnCount; i++) {
            Object field = value.getFieldValue(i);
            values.add(field == null ? null : field.toString());
          }
          out.add(row("rows", location, id.getWriteId(), id.getBucketProperty(), id.getRowId(), values));
        }
      } finally {
        reader.close();
      }
    }
    out.forEach(System.out::println);
  }

  static void vectorized(JobConf conf, String location, String[] names, List<TypeInfo> types) throws Exception {
    int columns = names.length;
    String[] rowNames = Arrays.copyOf(names, columns + 1);
    rowNames[columns] = VirtualColumn.ROWID.getName();
    TypeInfo[] rowTypes = types.toArray(new TypeInfo[columns + 1]);
    rowTypes[columns] = VirtualColumn.ROWID.getTypeInfo();
    DataTypePhysicalVariation[] variations = new DataTypePhysicalVariation[columns + 1];
    Arrays.fill(variations, DataTypePhysicalVariation.NONE);
    VectorizedRowBatchCtx context = new VectorizedRowBatchCtx(rowNames, rowTypes, variations, null, 0, 1,
        new VirtualColumn[] {VirtualColumn.ROWID}, new String[0], new DataTypePhysicalVariation[0]);
    JobConf vectorConf = new JobConf(conf);
    vectorConf.setBoolean("hive.vectorized.execution.enabled", true);
    List<String> out = new ArrayList<>();
    for (InputSplit split : new OrcInputFormat().getSplits(vectorConf, 1)) {
      VectorizedOrcAcidRowBatchReader reader =
          new VectorizedOrcAcidRowBatchReader((OrcSplit) split, vectorConf, Reporter.NULL, context);
      try {
        VectorizedRowBatch batch = context.createVectorizedRowBatch();
        while (reader.next(NullWritable.get(), batch)) {
          StructColumnVector rowIds = (StructColumnVector) batch.cols[columns];
          for (int j = 0; j < batch.size; j++) {
            int r = batch.selectedInUse ? batch.selected[j] : j;
            List<String> values = new ArrayList<>();
            for (int c = 0; c < columns; c++) {
              values.add(value(batch.cols[c], r));
            }
            out.add(row("vectorized", location, Long.parseLong(value(rowIds.fields[0], r)),
                Long.parseLong(value(rowIds.fields[1], r)), Long.parseLong(value(rowIds.fields[2], r)), values));
          }
        }
      } finally {
        reader.close();
      }
    }
    out.forEach(System.out::println);
  }

  static String value(ColumnVector vector, int row) {
    int r = vector.isRepeating ? 0 : row;
    if (!vector.noNulls && vector.isNull[r]) {
      return null;
    }
    if (vector instanceof LongColumnVector) {
      return Long.toString(((LongColumnVector) vector).vector[r]);
    }
    if (vector instanceof DoubleColumnVector) {
      return Double.toString(((DoubleColumnVector) vector).vector[r]);
    }
    if (vector instanceof BytesColumnVector) {
      return ((BytesColumnVector) vector).toString(r);
    }
    StringBuilder text = new StringBuilder();
    vector.stringifyValue(text, r);
    return text.toString();
  }

  static String row(String reader, String location, long writeId, long bucket, long rowId, List<String> values) {
    return "{\"reader\":\"" + reader + "\",\"location\":" + quote(location) + ",\"originalTransaction\":" + writeId
        + ",\"bucket\":" + bucket + ",\"rowId\":" + rowId + ",\"values\":" + quoteAll(values) + "}";
  }

  static void fail(String reader, String location, Throwable error) {
    Throwable cause = error instanceof java.lang.reflect.InvocationTargetException ? error.getCause() : error;
    System.out.println("{\"reader\":\"" + reader + "\",\"location\":" + quote(location) + ",\"error\":"
        + quote(cause.getClass().getName() + ": " + cause.getMessage()) + "}");
    cause.printStackTrace();
  }

  static String quoteAll(List<String> values) {
    List<String> quoted = new ArrayList<>();
    for (String value : values) {
      quoted.add(value == null ? "null" : quote(value));
    }
    return "[" + String.join(",", quoted) + "]";
  }

  static String quote(String text) {
    StringBuilder out = new StringBuilder("\"");
    for (char c : text.toCharArray()) {
      if (c == '"' || c == '\\') {
        out.append('\\').append(c);
      } else if (c < 0x20) {
        out.append(String.format("\\u%04x", (int) c));
      } else {
        out.append(c);
      }
    }
    return out.append('"').toString();
  }
}
